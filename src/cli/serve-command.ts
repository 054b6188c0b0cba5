/** `kvfence serve`: the colocated server, or with `--disaggregated` a gateway over supervised workers. */
import type { Command } from 'commander';
import { startDisaggregatedServer } from '../launch/cluster-server.js';
import { startServer } from '../launch/colocated-server.js';
import { reloadKeysOnHangup } from '../launch/open-gateway.js';
import { addFlags, type ParsedFlags, serveConfigOf } from './flags.js';

export function addServeCommand(program: Command): void {
  const command = program
    .command('serve')
    .description('serve a model over an OpenAI-compatible API (the embedded model unless --model is given)');
  addFlags(command, 'serve').action(async (o: ParsedFlags) => {
    const announce = (line: string) => process.stdout.write(`${line}\n`);
    const serve = serveConfigOf(o);
    const server =
      o.disaggregated === true
        ? await startDisaggregatedServer(
            { serve, prefillCount: Number(o.prefill), decodeCount: Number(o.decode), workerStdout: 'inherit' },
            announce,
          )
        : await startServer(serve, announce);
    const stopReloading = reloadKeysOnHangup(server, announce);
    let stopping = false;
    const stop = () => {
      if (stopping) process.exit(1); // a second signal: now
      stopping = true;
      stopReloading();
      announce(`kvfence: draining (at most ${o.drainTimeoutMs} ms)`);
      void server.drain(o.drainTimeoutMs).then(() => process.exit(0));
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}
