/**
 * `kvfence prefill` and `kvfence decode`: one worker process of a disaggregated deployment (DESIGN §1). Both take the
 * model, their own KV pool and scheduler bounds, a control listen address, and the cluster secret from
 * --cluster-secret-file or KVFENCE_CLUSTER_SECRET (never a plain flag, so it does not show in `ps`). Each proves I1 for
 * its own pool before it listens, or refuses to start with both numbers. Tenant limits come with each request from
 * the gateway, which owns the tenant table.
 */
import type { Command } from 'commander';
import { loadClusterSecret } from '../cluster/cluster-secret.js';
import type { WorkerRole } from '../cluster/control-protocol.js';
import { Hangup } from '../launch/hangup.js';
import { resolvePageCount } from '../launch/serve-config.js';
import { startWorker } from '../launch/start-worker.js';
import { serveWorkerHealth, type WorkerPhase } from '../launch/worker-health.js';
import { endWorkerOnSignal } from '../launch/worker-lifecycle.js';
import { DEFAULT_MODEL, ensureGeneratedModel } from '../model/default-model.js';
import { loadModel, weightsSummary } from '../model/load-model.js';
import { addFlags, type ParsedFlags, widensQ5_0, workerConfigOf } from './flags.js';

export function addWorkerCommand(program: Command, role: WorkerRole): void {
  const command = program
    .command(role)
    .description(
      role === 'prefill'
        ? 'run a prefill worker: computes prompt KV and pushes it to decode workers (disaggregated serving)'
        : 'run a decode worker: reserves pages, receives verified KV transfers, decodes (disaggregated serving)',
    );
  addFlags(command, role).action(async (o: ParsedFlags) => {
    const announce = (line: string) => process.stdout.write(`${line}\n`);
    new Hangup(announce).ignore('a worker has no key file');
    const { secret, warning } = loadClusterSecret(o.clusterSecretFile, process.env);
    if (warning !== undefined) announce(`kvfence: WARNING: ${warning}`);
    // the health listener first: a bad --health-listen fails the start before the model loads, and an orchestrator
    // sees the worker not ready (503) until it serves
    const state: { phase: WorkerPhase } = { phase: 'starting' };
    const health =
      o.healthListen === undefined ? undefined : await serveWorkerHealth(o.healthListen, () => state.phase);
    if (health !== undefined) announce(`kvfence: ${role} worker: health on http://${health.address}`);
    const model = loadModel(o.model ?? ensureGeneratedModel(DEFAULT_MODEL), { widenQ5_0: widensQ5_0(o) });
    announce(weightsSummary(model));
    const config = workerConfigOf(role, o, {
      modelPath: model.path,
      modelName: o.servedModelName ?? model.config.name,
      pageCount: resolvePageCount(model, o.pageSize, o.kvPages, o.kvMemory),
    });
    const worker = await startWorker(config, secret, { model, announce });
    const s = config.settings;
    announce(
      `kvfence: ${role} worker ${config.name}: KV pool ${s.pageCount} pages × ${s.pageSize} tokens; ${worker.capacity.summary}`,
    );
    announce(`kvfence: ${role} worker ${config.name}: control on ${worker.controlAddress}`);
    if (worker.transferAddress !== undefined)
      announce(`kvfence: ${role} worker ${config.name}: KV transfers on ${worker.transferAddress}`);
    endWorkerOnSignal(worker, {
      state,
      ...(health !== undefined ? { health } : {}),
      drainTimeoutMs: o.drainTimeoutMs,
      announce,
    });
    state.phase = 'ready';
  });
}
