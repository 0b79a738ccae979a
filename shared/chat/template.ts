import { Template } from "@huggingface/jinja";
import type { ChatMessage, ToolSpec } from "../protocol/openai.ts";

/**
 * Qwen2.5/Hermes-style chat template, shortened for a ~2k-token context: the system turn lists the
 * tools (their `function` objects as JSON) inside <tools></tools> with a one-line calling rule;
 * assistant tool calls render as `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`;
 * consecutive tool results share one user turn, each inside <tool_response></tool_response>.
 * Every assistant turn starts with the generation prompt `<|im_start|>assistant\n` and ends with
 * `<|im_end|>\n`, so prompt + generation + observation tokens concatenate to a full render.
 */
export const CHAT_TEMPLATE = `
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- '# Tools\\nCall one tool per turn as <tool_call>{"name": <name>, "arguments": <object>}</tool_call>\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' + (tool.function | tojson) }}{%- endfor %}
{{- '\\n</tools><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\\n' }}
{%- if message.content %}{{- message.content }}{%- endif %}
{%- if message.tool_calls %}
{%- for call in message.tool_calls %}
{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}
{{- '<tool_call>{"name": ' + (call.function.name | tojson) + ', "arguments": ' + (call.function.arguments | tojson) + '}</tool_call>' }}
{%- endfor %}
{%- endif %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user\\n' }}{%- endif %}
{{- '<tool_response>' + message.content + '</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
`;

/** Start of every assistant turn (the generation prompt). */
export const ASSISTANT_PREFIX = "<|im_start|>assistant\n";
/** End of every rendered turn. */
export const TURN_SUFFIX = "<|im_end|>\n";

const compiled = new Template(CHAT_TEMPLATE);

/**
 * Renders messages and tools to text. Tool-call arguments (OpenAI sends JSON text) are passed to
 * the template as objects so `tojson` prints them canonically; text that is not JSON stays a string.
 * @example renderChat([{ role: "user", content: "hi" }], [], { addGenerationPrompt: true })
 */
export function renderChat(
  messages: readonly ChatMessage[],
  tools: readonly ToolSpec[] | undefined,
  options: { addGenerationPrompt: boolean },
  template: Template = compiled,
): string {
  if (messages.length === 0) return options.addGenerationPrompt ? ASSISTANT_PREFIX : "";
  const templateMessages = messages.map((message) =>
    message.role === "assistant"
      ? {
          role: "assistant",
          content: message.content ?? "",
          tool_calls: (message.tool_calls ?? []).map((call) => ({
            function: { name: call.function.name, arguments: argumentsValue(call.function.arguments) },
          })),
        }
      : message,
  );
  return template.render({
    messages: templateMessages,
    tools: tools && tools.length > 0 ? tools : undefined,
    add_generation_prompt: options.addGenerationPrompt,
  });
}

function argumentsValue(text: string): unknown {
  if (text.trim() === "") return {};
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
