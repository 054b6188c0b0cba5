// deploy/kubernetes, rendered by `kubectl kustomize` for both overlays (with secret files written as an operator
// would) and every object validated against the Kubernetes API schemas (kubernetes-models); then what kvfence
// needs of them: probes on the health endpoints, requests, a non-root read-only container, a grace period above the
// drain deadline, headless worker Services that the gateway's --*-dns names point at, Secrets that exist, and only
// flags the kvfence command takes. Needs kubectl (.ci/run installs Debian's kubernetes-client when none is there).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { runCli } from '../helpers/cli.js';
import { tempDirectory } from '../helpers/temp.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const hasKubectl = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8', timeout: 30_000 }).status === 0;

// biome-ignore lint/suspicious/noExplicitAny: rendered YAML is untyped; each field read is asserted
type Obj = any;

function render(overlay: 'colocated' | 'disaggregated'): Obj[] {
  const dir = tempDirectory('kvfence-kustomize-');
  cpSync(join(ROOT, 'deploy', 'kubernetes'), join(dir, 'kubernetes'), { recursive: true });
  const secrets = join(dir, 'kubernetes', 'overlays', overlay, 'secrets');
  writeFileSync(join(secrets, 'api-keys.json'), '{"keys": []}\n');
  if (overlay === 'disaggregated') writeFileSync(join(secrets, 'cluster-secret'), `${'ab'.repeat(32)}\n`);
  const r = spawnSync('kubectl', ['kustomize', join(dir, 'kubernetes', 'overlays', overlay)], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  assert.equal(r.status, 0, r.stderr);
  const objects: Obj[] = parseAllDocuments(r.stdout).map((d) => d.toJSON());
  // kustomize v5 folds long base64 over lines (a YAML block); the API server's decoder skips the newlines
  for (const o of objects)
    if (o.kind === 'Secret')
      for (const key of Object.keys(o.data ?? {})) o.data[key] = String(o.data[key]).replace(/\s+/g, '');
  return objects;
}

/** Validates one object against its API schema (kubernetes-models), e.g. apps/v1 Deployment. */
async function validate(o: Obj): Promise<void> {
  const module = (await import(`kubernetes-models/${o.apiVersion}/${o.kind}`)) as Record<
    string,
    new (
      data: Obj,
    ) => { validate(): void }
  >;
  const Model = module[o.kind];
  assert.ok(Model !== undefined, `a schema for ${o.apiVersion} ${o.kind}`);
  new Model(o).validate();
}

function flagValue(args: readonly string[], flag: string): string | undefined {
  return args.find((a) => a.startsWith(`${flag}=`))?.slice(flag.length + 1);
}

const helpOf = new Map<string, string>();
function help(command: string): string {
  if (!helpOf.has(command)) helpOf.set(command, runCli([command, '--help']).stdout);
  return helpOf.get(command)!;
}

function checkWorkload(d: Obj, objects: Obj[]): void {
  const pod = d.spec.template.spec;
  const [c] = pod.containers;
  const what = `${d.metadata.name}`;
  assert.equal(pod.securityContext.runAsNonRoot, true, `${what} runs as non-root`);
  assert.notEqual(pod.securityContext.runAsUser, 0);
  assert.equal(c.securityContext.readOnlyRootFilesystem, true, `${what} has a read-only root`);
  assert.ok(c.resources.requests.cpu && c.resources.requests.memory, `${what} requests cpu and memory`);
  assert.equal(c.livenessProbe.httpGet.path, '/health/live');
  assert.equal(c.readinessProbe.httpGet.path, '/health/ready');
  const probePort = c.readinessProbe.httpGet.port;
  assert.ok(
    c.ports.some((p: Obj) => p.name === probePort),
    `${what}'s probes hit a port it declares`,
  );
  // every flag is one the command takes; the drain deadline is below the grace period (with the preStop pause)
  const [command, ...args] = c.args as string[];
  for (const a of args) {
    const flag = a.split('=')[0]!;
    assert.match(help(command!), new RegExp(`${flag}[ ,<]`), `kvfence ${command} takes ${flag}`);
  }
  const drainMs = Number(flagValue(args, '--drain-timeout-ms'));
  const preStopS = Number(c.lifecycle?.preStop?.exec?.command?.[1] ?? 0);
  assert.ok(
    drainMs > 0 && pod.terminationGracePeriodSeconds * 1000 > drainMs + preStopS * 1000,
    `${what}: grace ${pod.terminationGracePeriodSeconds} s > drain ${drainMs} ms + preStop ${preStopS} s`,
  );
  // writable places are volumes: the incident store, /tmp; the model is mounted read-only
  const mounts = new Map<string, Obj>(c.volumeMounts.map((m: Obj) => [m.mountPath, m]));
  assert.equal(mounts.get('/models')?.readOnly, true);
  assert.ok(mounts.has('/tmp'));
  assert.equal(flagValue(args, '--model'), '/models/model.gguf');
  const db = flagValue(args, '--incidents-db');
  if (db !== undefined) assert.ok([...mounts.keys()].some((m) => db.startsWith(`${m}/`) && m !== '/models'));
  // every Secret a pod mounts is rendered (kustomize rewrote the names to the generated ones)
  for (const v of pod.volumes)
    if (v.secret !== undefined)
      assert.ok(
        objects.some((o) => o.kind === 'Secret' && o.metadata.name === v.secret.secretName),
        `Secret ${v.secret.secretName} exists`,
      );
}

describe('Kubernetes manifests', { skip: hasKubectl ? false : 'needs kubectl (Debian: kubernetes-client)' }, () => {
  for (const overlay of ['colocated', 'disaggregated'] as const) {
    test(`${overlay}: renders, every object valid against the API schemas, kvfence's needs met`, async () => {
      const objects = render(overlay);
      for (const o of objects) await validate(o);
      const kinds = objects.map((o) => `${o.kind}/${o.metadata.name.replace(/-[a-z0-9]{10}$/, '')}`).sort();
      const expected = [
        'Deployment/kvfence-gateway',
        'PersistentVolumeClaim/kvfence-models',
        'PodDisruptionBudget/kvfence-gateway',
        'Secret/kvfence-api-keys',
        'Service/kvfence',
      ];
      if (overlay === 'disaggregated')
        for (const role of ['prefill', 'decode'])
          expected.push(`Deployment/kvfence-${role}`, `PodDisruptionBudget/kvfence-${role}`, `Service/kvfence-${role}`);
      if (overlay === 'disaggregated') expected.push('Secret/kvfence-cluster-secret');
      assert.deepEqual(kinds, expected.sort());

      const deployments = objects.filter((o) => o.kind === 'Deployment');
      for (const d of deployments) checkWorkload(d, objects);
      const gateway = deployments.find((d) => d.metadata.name === 'kvfence-gateway');
      const annotations = gateway.spec.template.metadata.annotations;
      assert.equal(annotations['prometheus.io/scrape'], 'true');
      assert.ok(
        gateway.spec.template.spec.containers[0].ports.some(
          (p: Obj) => String(p.containerPort) === annotations['prometheus.io/port'],
        ),
      );
      for (const pdb of objects.filter((o) => o.kind === 'PodDisruptionBudget'))
        assert.equal(pdb.spec.maxUnavailable, 1);
      const args = gateway.spec.template.spec.containers[0].args as string[];
      if (overlay === 'colocated') {
        assert.equal(args[0], 'serve');
        return;
      }
      assert.equal(args[0], 'gateway');
      // each gateway enforces 1/N of every tenant limit: N is how many run, and a rollout never runs more
      assert.equal(
        Number(flagValue(args, '--gateways') ?? 1),
        gateway.spec.replicas,
        '--gateways is the replica count',
      );
      if (gateway.spec.replicas > 1) assert.equal(gateway.spec.strategy.rollingUpdate.maxSurge, 0);
      for (const role of ['prefill', 'decode']) {
        // the gateway's DNS name is the role's headless Service, on the port the workers listen on
        const [name, port] = flagValue(args, `--${role}-dns`)!.split(':');
        const service = objects.find((o) => o.kind === 'Service' && o.metadata.name === name);
        assert.equal(service.spec.clusterIP, 'None', `${name} is headless: its DNS name lists every ready pod`);
        const worker = deployments.find((d) => d.metadata.name === `kvfence-${role}`);
        assert.deepEqual(service.spec.selector, worker.spec.selector.matchLabels);
        const listen = flagValue(worker.spec.template.spec.containers[0].args, '--control-listen');
        assert.equal(listen, `0.0.0.0:${port}`);
        assert.ok(service.spec.ports.some((p: Obj) => String(p.port) === port));
        assert.equal(worker.spec.strategy.rollingUpdate.maxUnavailable, 0, 'the successor is up before a worker goes');
        assert.ok(worker.spec.replicas >= 2, 'one worker of each role stays up while another restarts');
      }
    });
  }

  test('an invalid object is caught by the schema check (the check can fail)', async () => {
    const [d] = render('colocated').filter((o) => o.kind === 'Deployment');
    d.spec.replicas = 'two';
    await assert.rejects(validate(d), /replicas/);
  });
});
