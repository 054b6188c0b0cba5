/**
 * A stand-in worker program for supervisor tests: on its start message it writes its pid to `<dir>/<name>.pid` (the
 * directory is its argument), then a worker named `fails` exits 1, one named `ready` reports ready, and any other
 * never does (a worker still starting).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2]!;
process.on('message', (message: { config: { name: string } }) => {
  const { name } = message.config;
  writeFileSync(join(dir, `${name}.pid`), String(process.pid));
  if (name === 'fails') process.exit(1);
  if (name === 'ready') process.send?.({ kind: 'ready', control: '127.0.0.1:1' });
});
setInterval(() => {}, 1_000); // stays up until told otherwise
