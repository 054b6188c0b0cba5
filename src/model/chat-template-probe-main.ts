/**
 * The chat template probe's own process (chat-template.ts: loadChatTemplate), started with a heap bound and killed
 * past a time bound: reads {source, tokens} as JSON on stdin, renders the probe, writes its ProbeOutcome as JSON.
 */
import { readFileSync } from 'node:fs';
import { probeTemplate } from './chat-template.js';

const { source, tokens } = JSON.parse(readFileSync(0, 'utf8')) as {
  source: string;
  tokens: Parameters<typeof probeTemplate>[1];
};
process.stdout.write(JSON.stringify(probeTemplate(source, tokens)));
