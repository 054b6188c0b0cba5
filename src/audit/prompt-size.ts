/**
 * How many tokens the endpoint makes of the auditor's filler words: two small non-streamed requests (8 and 56 words),
 * read from usage.prompt_tokens or, failing that, a /tokenize endpoint. The timing scenarios size their prompts
 * with it.
 */
import type { AuditContext } from './audit-context.js';
import type { ScenarioResult } from './findings.js';
import type { AuditTenant } from './keys-file.js';

export interface PromptSize {
  /** tokens a filler word adds */
  perWord: number;
  /** tokens of an empty prompt (BOS, template) */
  base: number;
}

const SPAN_WORDS = 48;

export async function measurePromptSize(
  ctx: AuditContext,
  result: ScenarioResult,
  tenant: AuditTenant,
): Promise<PromptSize | undefined> {
  const count = async (words: number): Promise<number | undefined> => {
    const prompt = ctx.words(words);
    const r = await ctx.call(
      {
        tenant,
        scenario: result.scenario,
        label: `count ${words} words`,
        prompt,
        maxTokens: 1,
        stream: false,
        greedy: false,
      },
      result,
    );
    if (r.status !== 200) return undefined;
    return r.promptTokens ?? (await ctx.endpoint.tokenize(tenant, prompt));
  };
  const a = await count(8);
  const b = await count(8 + SPAN_WORDS);
  if (a === undefined || b === undefined || !(b > a)) {
    result.notes.push('cannot count prompt tokens (no usage.prompt_tokens, no /tokenize)');
    return undefined;
  }
  const perWord = (b - a) / SPAN_WORDS;
  return { perWord, base: Math.max(0, a - 8 * perWord) };
}
