// The container image's recipe. No container engine runs here or in CI, so: (1) the Dockerfile is linted — two
// stages, the kernels and TypeScript built in `build`, only build outputs copied into `runtime`, a non-root USER,
// `kvfence` as the exec-form ENTRYPOINT, writable paths under /tmp, nothing fetched by ADD or curl — and (2), opt-in
// with KVFENCE_IMAGE_TEST=1 (several minutes: npm ci and the native build from scratch), its build-stage RUN steps
// are run on the host in a clean copy of the tree as the image would, the runtime stage's COPY steps assembled in a
// fresh read-only directory, and the entrypoint started there until /health/ready answers 200.
import assert from 'node:assert/strict';
import { type ChildProcess, execSync, spawn, spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { tempDirectory } from '../helpers/temp.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

interface Instruction {
  op: string;
  args: string;
}
interface Stage {
  name: string;
  from: string;
  steps: Instruction[];
}

/** Instructions by stage: comments dropped, `\` continuations joined. */
function parseDockerfile(text: string): { args: Map<string, string>; stages: Stage[] } {
  const lines = text.split('\n').filter((l) => !/^\s*#/.test(l));
  const joined = lines.join('\n').replace(/\\\n/g, ' ');
  const args = new Map<string, string>();
  const stages: Stage[] = [];
  for (const line of joined.split('\n')) {
    const m = /^\s*([A-Z]+)\s+(.*)$/.exec(line);
    if (m === null) continue;
    const [, op, rest] = m as unknown as [string, string, string];
    if (op === 'FROM') {
      const f = /^(\S+)\s+AS\s+(\S+)$/i.exec(rest.trim());
      assert.ok(f !== null, `FROM names its stage: ${rest}`);
      stages.push({ name: f[2]!, from: f[1]!, steps: [] });
    } else if (op === 'ARG' && stages.length === 0) {
      const [k, v] = rest.trim().split('=');
      args.set(k!, v ?? '');
    } else {
      assert.ok(stages.length > 0, `${op} before any FROM`);
      stages.at(-1)!.steps.push({ op, args: rest.trim().replace(/\s+/g, ' ') });
    }
  }
  return { args, stages };
}

const dockerfile = parseDockerfile(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'));
const stage = (name: string) => dockerfile.stages.find((s) => s.name === name)!;
const runs = (name: string) =>
  stage(name)
    .steps.filter((s) => s.op === 'RUN')
    .map((s) => s.args);

describe('Dockerfile', () => {
  test('two stages from a Node 20 image: build (kernels, TypeScript, prune) and runtime', () => {
    assert.deepEqual(
      dockerfile.stages.map((s) => s.name),
      ['build', 'runtime'],
    );
    assert.match(dockerfile.args.get('NODE_IMAGE') ?? '', /^node:20[.-]/);
    for (const s of dockerfile.stages) assert.equal(s.from, '$' + '{NODE_IMAGE}');
    const build = runs('build');
    const at = (pattern: RegExp) => build.findIndex((r) => pattern.test(r));
    assert.ok(at(/\bnpm ci\b/) >= 0, 'npm ci (the native kernels and tsc run in its install and prepare scripts)');
    assert.ok(at(/npm run build:native/) > at(/\bnpm ci\b/), 'the image fails to build without its kernels');
    assert.ok(at(/npm prune --omit=dev/) > at(/npm run build:native/), 'dev dependencies pruned last');
  });

  test('runtime: only build outputs, non-root, kvfence as the exec-form entrypoint, writes only under /tmp', () => {
    const steps = stage('runtime').steps;
    const copies = steps.filter((s) => s.op === 'COPY');
    assert.ok(copies.length > 0 && copies.every((c) => c.args.startsWith('--from=build ')), 'copies from build only');
    const copied = copies.map((c) => c.args.split(' ')[1]);
    for (const path of ['/src/dist/src', '/src/node_modules', '/src/build/Release/kvfence_native.node'])
      assert.ok(copied.includes(path), `runtime has ${path}`);
    const user = steps.filter((s) => s.op === 'USER').at(-1)?.args ?? 'root';
    assert.ok(!/^(root|0)(:|$)/.test(user), `runs as ${user}`);
    const entry = steps.find((s) => s.op === 'ENTRYPOINT')?.args;
    assert.deepEqual(JSON.parse(entry ?? 'null'), ['kvfence'], 'exec form, so SIGTERM reaches kvfence (drain)');
    const env = steps
      .filter((s) => s.op === 'ENV')
      .map((s) => s.args)
      .join(' ');
    assert.match(env, /KVFENCE_CACHE_DIR=\/tmp\//);
    assert.match(env, /XDG_STATE_HOME=\/tmp\//);
  });

  test('nothing fetched from a URL; .dockerignore keeps build outputs, models and .git out', () => {
    for (const s of dockerfile.stages)
      for (const step of s.steps) {
        assert.notEqual(step.op, 'ADD', 'COPY, not ADD');
        if (step.op === 'RUN') assert.doesNotMatch(step.args, /\b(curl|wget)\b|https?:\/\//);
      }
    const ignored = readFileSync(join(ROOT, '.dockerignore'), 'utf8').split('\n');
    for (const entry of ['node_modules', 'dist', 'build', '.git', '*.gguf']) assert.ok(ignored.includes(entry), entry);
  });
});

const imageTest = process.env['KVFENCE_IMAGE_TEST'] === '1';

describe('the image built and run on the host', { skip: imageTest ? false : 'opt-in: KVFENCE_IMAGE_TEST=1' }, () => {
  let server: ChildProcess | undefined;
  let app: string | undefined;
  after(() => {
    server?.kill('SIGKILL');
    if (app !== undefined) execSync(`chmod -R u+w ${app}`); // so the temporary directory can be removed
  });

  test('build-stage RUN steps in a clean copy, runtime assembled read-only, /health/ready 200', async () => {
    const dir = tempDirectory('kvfence-image-');
    const src = join(dir, 'src');
    // the build context: the tree as git sees it (tracked and new files, not ignored ones), less .dockerignore's
    const ignore = readFileSync(join(ROOT, '.dockerignore'), 'utf8')
      .split('\n')
      .filter((l) => l !== '' && !l.startsWith('#'));
    const files = execSync('git ls-files -co --exclude-standard', { cwd: ROOT, encoding: 'utf8' })
      .split('\n')
      .filter((f) => f !== '')
      .filter((f) => !ignore.some((p) => (p.startsWith('*.') ? f.endsWith(p.slice(1)) : f.split('/')[0] === p)));
    for (const f of files) {
      mkdirSync(dirname(join(src, f)), { recursive: true });
      try {
        cpSync(join(ROOT, f), join(src, f));
      } catch {
        // a file listed by git but deleted in the work tree is not in the context either
      }
    }
    for (const run of runs('build')) {
      if (run.startsWith('apt-get')) continue; // the host has the toolchain
      const r = spawnSync('sh', ['-c', run], { cwd: src, stdio: 'inherit', timeout: 900_000 });
      assert.equal(r.status, 0, run);
    }
    app = join(dir, 'app');
    for (const c of stage('runtime').steps.filter((s) => s.op === 'COPY')) {
      const [, from, to] = c.args.split(' ') as [string, string, string];
      cpSync(join(src, from.replace(/^\/src\/?/, '')), join(app!, to), { recursive: true });
    }
    execSync(`chmod -R a-w ${app}`);
    const tmp = join(dir, 'tmp');
    mkdirSync(tmp);
    server = spawn(process.execPath, [join(app, 'dist/src/cli/main.js'), 'serve', '--host=127.0.0.1', '--port=0'], {
      cwd: app,
      env: {
        PATH: process.env['PATH'],
        NODE_ENV: 'production',
        HOME: join(dir, 'no-home'),
        KVFENCE_CACHE_DIR: join(tmp, 'kvfence/cache'),
        XDG_STATE_HOME: join(tmp, 'kvfence/state'),
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const url = await new Promise<string>((resolve, reject) => {
      let out = '';
      const timer = setTimeout(() => reject(new Error(`no URL within 120 s: ${out}`)), 120_000);
      server!.stdout!.on('data', (chunk: Buffer) => {
        out += chunk.toString('utf8');
        const m = /on (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
        if (m !== null) {
          clearTimeout(timer);
          resolve(m[1]!);
        }
      });
    });
    const ready = await fetch(`${url}/health/ready`, { signal: AbortSignal.timeout(10_000) });
    assert.equal(ready.status, 200);
  });
});
