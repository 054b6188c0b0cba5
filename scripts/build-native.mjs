// Builds the native kernels (build/Release/kvfence_native.node) with node-gyp. Run by `npm install` (package.json
// "install"), where it never fails the install: without a compiler kvfence still runs on the TypeScript backend, so a
// failed build prints one warning and exits 0. `--strict` (npm run build:native) exits 1 instead.
//
// node-gyp: npm's own copy (npm sets npm_config_node_gyp for scripts), else the one beside this node's npm, else PATH.
// Headers: this node's own include/node when it has them (no download), else node-gyp fetches them as usual.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const strict = process.argv.includes('--strict');
const logPath = join(root, 'build', 'native-build.log');
const addonPath = join(root, 'build', 'Release', 'kvfence_native.node');
const timeoutMs = 15 * 60 * 1000;

function nodeGypCommand() {
  const candidates = [
    process.env.npm_config_node_gyp,
    join(dirname(process.execPath), '..', 'lib', 'node_modules', 'npm', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'),
  ];
  for (const candidate of candidates) {
    if (candidate && existsSync(candidate)) return [process.execPath, candidate];
  }
  return ['node-gyp'];
}

/** This node's own headers, when they are there and of this exact version. */
function localNodeDir() {
  const prefix = resolve(dirname(process.execPath), '..');
  try {
    const header = readFileSync(join(prefix, 'include', 'node', 'node_version.h'), 'utf8');
    const part = (name) => header.match(new RegExp(`#define NODE_${name}_VERSION (\\d+)`))?.[1];
    const version = `v${part('MAJOR')}.${part('MINOR')}.${part('PATCH')}`;
    return version === process.version ? prefix : undefined;
  } catch {
    return undefined;
  }
}

function finish(ok, reason) {
  if (ok) {
    console.log(`kvfence: native kernels built: ${addonPath}`);
    process.exit(0);
  }
  console.warn(
    `kvfence: WARNING: the native kernels were not built (${reason}); kvfence will run on its slower TypeScript ` +
      `backend. Compiler output: ${logPath}. Retry with: npm run build:native`,
  );
  process.exit(strict ? 1 : 0);
}

if (process.env.KVFENCE_SKIP_NATIVE === '1') finish(false, 'KVFENCE_SKIP_NATIVE=1');

const [command, ...prefixArgs] = nodeGypCommand();
const nodeDir = localNodeDir();
const args = [...prefixArgs, 'rebuild', '--release', '--jobs=max', ...(nodeDir ? [`--nodedir=${nodeDir}`] : [])];
const result = spawnSync(command, args, { cwd: root, encoding: 'utf8', timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 });
mkdirSync(dirname(logPath), { recursive: true });
writeFileSync(logPath, `$ ${command} ${args.join(' ')}\n${result.stdout ?? ''}${result.stderr ?? ''}${result.error ? `${result.error}\n` : ''}`);
if (result.error) finish(false, `could not run node-gyp: ${result.error.message}`);
if (result.status !== 0) {
  const lastError = `${result.stderr ?? ''}${result.stdout ?? ''}`
    .split('\n')
    .filter((line) => /error/i.test(line))
    .at(0);
  finish(false, `node-gyp exited with ${result.status ?? result.signal}${lastError ? `: ${lastError.trim()}` : ''}`);
}
finish(existsSync(addonPath), `node-gyp succeeded but ${addonPath} is missing`);
