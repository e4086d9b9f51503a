import { Schema } from "effect"

/** Chat-completions request codec (the public chat-completions API the `openai` SDK sends). */

const Text = Schema.Struct({ type: Schema.Literal("text"), text: Schema.String })
const Refusal = Schema.Struct({ type: Schema.Literal("refusal"), refusal: Schema.String })
const ImageUrl = Schema.Struct({
  type: Schema.Literal("image_url"),
  image_url: Schema.Struct({ url: Schema.String, detail: Schema.optional(Schema.String) })
})
const File = Schema.Struct({
  type: Schema.Literal("file"),
  file: Schema.Struct({ file_id: Schema.optional(Schema.String), file_data: Schema.optional(Schema.String), filename: Schema.optional(Schema.String) })
})
const InputAudio = Schema.Struct({ type: Schema.Literal("input_audio"), input_audio: Schema.Unknown })

export const UserPart = Schema.Union(Text, ImageUrl, File, InputAudio)
export type UserPart = typeof UserPart.Type

const TextContent = Schema.Union(Schema.String, Schema.Array(Text))

export const ToolCall = Schema.Struct({
  id: Schema.String,
  type: Schema.optionalWith(Schema.Literal("function"), { default: () => "function" as const }),
  function: Schema.Struct({ name: Schema.String, arguments: Schema.String })
})

export const ChatMessage = Schema.Union(
  Schema.Struct({ role: Schema.Literal("system", "developer"), content: TextContent, name: Schema.optional(Schema.String) }),
  Schema.Struct({ role: Schema.Literal("user"), content: Schema.Union(Schema.String, Schema.Array(UserPart)), name: Schema.optional(Schema.String) }),
  Schema.Struct({
    role: Schema.Literal("assistant"),
    content: Schema.optional(Schema.NullOr(Schema.Union(Schema.String, Schema.Array(Schema.Union(Text, Refusal))))),
    tool_calls: Schema.optional(Schema.NullOr(Schema.Array(ToolCall))),
    reasoning_content: Schema.optional(Schema.NullOr(Schema.String)),
    name: Schema.optional(Schema.String),
    refusal: Schema.optional(Schema.NullOr(Schema.String))
  }),
  Schema.Struct({ role: Schema.Literal("tool"), tool_call_id: Schema.String, content: TextContent })
)
export type ChatMessage = typeof ChatMessage.Type

const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown })

export const Tool = Schema.Struct({
  type: Schema.String,
  function: Schema.optional(
    Schema.Struct({
      name: Schema.String.pipe(Schema.pattern(/^[a-zA-Z0-9_.-]{1,64}$/, { message: () => "a tool name is 1 to 64 letters, digits, _, . or -" })),
      description: Schema.optional(Schema.String),
      parameters: Schema.optional(Schema.NullOr(JsonObject)),
      strict: Schema.optional(Schema.NullOr(Schema.Boolean))
    })
  )
})

export const ToolChoice = Schema.Union(
  Schema.Literal("auto", "none", "required"),
  Schema.Struct({ type: Schema.Literal("function"), function: Schema.Struct({ name: Schema.String }) })
)

export const ResponseFormat = Schema.Union(
  Schema.Struct({ type: Schema.Literal("text") }),
  Schema.Struct({ type: Schema.Literal("json_object") }),
  Schema.Struct({
    type: Schema.Literal("json_schema"),
    json_schema: Schema.Struct({
      name: Schema.String,
      description: Schema.optional(Schema.String),
      schema: Schema.optional(JsonObject),
      strict: Schema.optional(Schema.NullOr(Schema.Boolean))
    })
  })
)

const Unit = Schema.Number.pipe(Schema.between(0, 1))
const Penalty = Schema.Number.pipe(Schema.between(-2, 2))
const PositiveInt = Schema.Int.pipe(Schema.positive())
const Stop = Schema.Union(Schema.String, Schema.Array(Schema.String).pipe(Schema.maxItems(4)))

const sampling = {
  temperature: Schema.optional(Schema.NullOr(Schema.Number.pipe(Schema.between(0, 2)))),
  top_p: Schema.optional(Schema.NullOr(Unit)),
  top_k: Schema.optional(Schema.NullOr(Schema.Int.pipe(Schema.nonNegative()))),
  seed: Schema.optional(Schema.NullOr(Schema.Int)),
  presence_penalty: Schema.optional(Schema.NullOr(Penalty)),
  frequency_penalty: Schema.optional(Schema.NullOr(Penalty)),
  stop: Schema.optional(Schema.NullOr(Stop)),
  n: Schema.optional(Schema.NullOr(PositiveInt)),
  stream: Schema.optional(Schema.NullOr(Schema.Boolean)),
  stream_options: Schema.optional(Schema.NullOr(Schema.Struct({ include_usage: Schema.optional(Schema.Boolean) }))),
  max_tokens: Schema.optional(Schema.NullOr(PositiveInt)),
  user: Schema.optional(Schema.String)
}

export const ChatRequest = Schema.Struct({
  model: Schema.String.pipe(Schema.minLength(1)),
  messages: Schema.Array(ChatMessage).pipe(Schema.minItems(1)),
  tools: Schema.optional(Schema.NullOr(Schema.Array(Tool))),
  tool_choice: Schema.optional(Schema.NullOr(ToolChoice)),
  parallel_tool_calls: Schema.optional(Schema.NullOr(Schema.Boolean)),
  response_format: Schema.optional(Schema.NullOr(ResponseFormat)),
  max_completion_tokens: Schema.optional(Schema.NullOr(PositiveInt)),
  reasoning_effort: Schema.optional(Schema.NullOr(Schema.String)),
  /** the caller's end user when `user` is absent (read only when it is a string) */
  safety_identifier: Schema.optional(Schema.Unknown),
  /** the client's conversation name: keeps a conversation on one target with affinity */
  prompt_cache_key: Schema.optional(Schema.NullOr(Schema.String)),
  ...sampling
})
export type ChatRequest = typeof ChatRequest.Type

export const CompletionRequest = Schema.Struct({
  model: Schema.String.pipe(Schema.minLength(1)),
  prompt: Schema.Union(Schema.String, Schema.Array(Schema.String).pipe(Schema.minItems(1))),
  suffix: Schema.optional(Schema.NullOr(Schema.String)),
  echo: Schema.optional(Schema.NullOr(Schema.Boolean)),
  safety_identifier: Schema.optional(Schema.Unknown),
  ...sampling
})
export type CompletionRequest = typeof CompletionRequest.Type
