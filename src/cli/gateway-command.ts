/** `kvfence gateway`: the HTTP gateway over prefill and decode workers started on their own (disaggregated). */
import type { Command } from 'commander';
import { loadClusterSecret } from '../cluster/cluster-secret.js';
import { gatewaySettingsOf } from '../launch/colocated-server.js';
import { startGateway } from '../launch/gateway-server.js';
import { reloadKeysOnHangup } from '../launch/open-gateway.js';
import { addFlags, addressList, type ParsedFlags, serveConfigOf } from './flags.js';

export function addGatewayCommand(program: Command): void {
  const command = program
    .command('gateway')
    .description('run the HTTP gateway over prefill and decode workers (disaggregated serving)');
  addFlags(command, 'gateway').action(async (o: ParsedFlags) => {
    const announce = (line: string) => process.stdout.write(`${line}\n`);
    const { secret, warning } = loadClusterSecret(o.clusterSecretFile, process.env);
    if (warning !== undefined) announce(`kvfence: WARNING: ${warning}`);
    const serve = serveConfigOf(o);
    const running = await startGateway(
      {
        ...gatewaySettingsOf(serve),
        ...(serve.modelPath !== undefined ? { modelPath: serve.modelPath } : {}),
        ...(serve.modelName !== undefined ? { modelName: serve.modelName } : {}),
        prefill: addressList('--prefill', String(o.prefill)),
        decode: addressList('--decode', String(o.decode)),
        secret,
        ...(serve.contextCap !== undefined ? { contextCap: serve.contextCap } : {}),
        connectTimeoutMs: o.connectTimeoutMs,
        logLevel: o.logLevel,
      },
      announce,
    );
    const stopReloading = reloadKeysOnHangup(running, announce);
    const stop = () => {
      stopReloading();
      void running.close().then(() => process.exit(0));
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
}
