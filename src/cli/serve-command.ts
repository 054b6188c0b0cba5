/**
 * `kvfence serve`: the colocated server (the engine on its own thread unless `--no-engine-thread`), or with
 * `--disaggregated` a gateway over supervised workers.
 */
import type { Command } from 'commander';
import { startDisaggregatedServer } from '../launch/cluster-server.js';
import { startServer, startThreadedServer } from '../launch/colocated-server.js';
import { Hangup } from '../launch/hangup.js';
import { addFlags, type ParsedFlags, serveConfigOf } from './flags.js';

export function addServeCommand(program: Command): void {
  const command = program
    .command('serve')
    .description('serve a model over an OpenAI-compatible API (the embedded model unless --model is given)');
  addFlags(command, 'serve').action(async (o: ParsedFlags) => {
    const announce = (line: string) => process.stdout.write(`${line}\n`);
    const hangup = new Hangup(announce);
    const serve = serveConfigOf(o);
    const server =
      o.disaggregated === true
        ? await startDisaggregatedServer(
            {
              serve,
              prefillCount: Number(o.prefill),
              decodeCount: Number(o.decode),
              workerStartTimeoutMs: o.workerStartTimeoutMs,
              workerStdout: 'inherit',
            },
            announce,
          )
        : o.engineThread === false
          ? await startServer(serve, announce)
          : await startThreadedServer(serve, announce, (why) => {
              // nothing can serve any more: exit (once the 503s are written), so that a supervisor starts it again
              process.stderr.write(`kvfence: the engine thread ${why}; exiting\n`);
              setTimeout(() => process.exit(1), 1_000).unref();
            });
    hangup.serving(server);
    let stopping = false;
    const stop = () => {
      if (stopping) process.exit(1); // a second signal: now
      stopping = true;
      hangup.ignore('the server is draining');
      announce(`kvfence: draining (at most ${o.drainTimeoutMs} ms)`);
      void server.drain(o.drainTimeoutMs).then(() => process.exit(0));
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}
