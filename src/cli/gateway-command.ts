/** `kvfence gateway`: the HTTP gateway over prefill and decode workers started on their own (disaggregated). */
import type { Command } from 'commander';
import { loadClusterSecret } from '../cluster/cluster-secret.js';
import { gatewaySettingsOf } from '../launch/colocated-server.js';
import { startGateway } from '../launch/gateway-server.js';
import { Hangup } from '../launch/hangup.js';
import { addFlags, type ParsedFlags, serveConfigOf, workerResolversOf } from './flags.js';

export function addGatewayCommand(program: Command): void {
  const command = program
    .command('gateway')
    .description('run the HTTP gateway over prefill and decode workers (disaggregated serving)');
  addFlags(command, 'gateway').action(async (o: ParsedFlags) => {
    const announce = (line: string) => process.stdout.write(`${line}\n`);
    const hangup = new Hangup(announce);
    const { secret, warning } = loadClusterSecret(o.clusterSecretFile, process.env);
    if (warning !== undefined) announce(`kvfence: WARNING: ${warning}`);
    const serve = serveConfigOf(o);
    const running = await startGateway(
      {
        ...gatewaySettingsOf(serve),
        ...(serve.modelPath !== undefined ? { modelPath: serve.modelPath } : {}),
        ...(serve.modelName !== undefined ? { modelName: serve.modelName } : {}),
        resolvers: workerResolversOf(o),
        dnsRefreshMs: o.dnsRefreshMs,
        secret,
        ...(serve.contextCap !== undefined ? { contextCap: serve.contextCap } : {}),
        connectTimeoutMs: o.connectTimeoutMs,
        logLevel: o.logLevel,
      },
      announce,
    );
    hangup.serving(running);
    let stopping = false;
    const stop = () => {
      if (stopping) process.exit(1); // a second signal: now
      stopping = true;
      hangup.ignore('the gateway is draining');
      announce(`kvfence: draining (at most ${o.drainTimeoutMs} ms)`);
      void running.drain(o.drainTimeoutMs).then(() => process.exit(0));
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}
