/**
 * The serving test model with a tool-aware chat template (Hermes style, written for these tests): tools listed in a
 * system turn, calls as <tool_call> blocks, tool answers as <tool_response> — so a server reads its tool calls in the
 * hermes format and the `tools` variable visibly reaches the prompt.
 */
import { join } from 'node:path';
import { writeGguf } from '../../src/model/gguf-write.js';
import { makeTestModel } from '../../src/model/test-model.js';
import { tempDirectory } from '../helpers/temp.js';
import { SERVING_MODEL } from './serve-helpers.js';

export const TOOL_TEMPLATE =
  '{%- if tools %}<|im_start|>system\n# Tools\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}' +
  'Call one as <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n{% endif %}' +
  "{%- for message in messages %}{%- if message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant\n" +
  '{% for call in message.tool_calls %}<tool_call>{"name": "{{ call.function.name }}", "arguments": ' +
  '{{ call.function.arguments | tojson }}}</tool_call>\n{% endfor %}<|im_end|>\n' +
  "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>{{ message.content }}</tool_response><|im_end|>\n" +
  '{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endif %}{%- endfor %}' +
  '{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}';

let path: string | undefined;

export function toolModelFile(): string {
  if (path === undefined) {
    const made = makeTestModel({ ...SERVING_MODEL, contextLength: 1024 }); // tool definitions make long prompts
    made.metadata.set('tokenizer.chat_template', { type: 'string', value: TOOL_TEMPLATE });
    path = join(tempDirectory('kvfence-tool-model-'), 'tools.gguf');
    writeGguf(path, made.metadata, made.tensors);
  }
  return path;
}
