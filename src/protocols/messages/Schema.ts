import { Schema } from "effect"

/** Messages-style request codec (spec 4.2, 2.2). Content blocks are read one by one by type. */

const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown })

export const CacheControl = Schema.Struct({ type: Schema.Literal("ephemeral"), ttl: Schema.optional(Schema.Literal("5m", "1h")) })

export const TextBlock = Schema.Struct({ type: Schema.Literal("text"), text: Schema.String, cache_control: Schema.optional(Schema.NullOr(CacheControl)) })
export type TextBlock = typeof TextBlock.Type

const Base64Source = Schema.Struct({ type: Schema.Literal("base64"), media_type: Schema.String, data: Schema.String })
const UrlSource = Schema.Struct({ type: Schema.Literal("url"), url: Schema.String })
const FileSource = Schema.Struct({ type: Schema.Literal("file"), file_id: Schema.String })
const TextSource = Schema.Struct({ type: Schema.Literal("text"), media_type: Schema.optional(Schema.String), data: Schema.String })

export const ImageBlock = Schema.Struct({
  type: Schema.Literal("image"),
  source: Schema.Union(Base64Source, UrlSource, FileSource),
  cache_control: Schema.optional(Schema.NullOr(CacheControl))
})
export const DocumentBlock = Schema.Struct({
  type: Schema.Literal("document"),
  source: Schema.Union(Base64Source, UrlSource, FileSource, TextSource),
  title: Schema.optional(Schema.NullOr(Schema.String)),
  cache_control: Schema.optional(Schema.NullOr(CacheControl))
})
export const ToolUseBlock = Schema.Struct({ type: Schema.Literal("tool_use"), id: Schema.String, name: Schema.String, input: Schema.Unknown })
export const ToolResultBlock = Schema.Struct({
  type: Schema.Literal("tool_result"),
  tool_use_id: Schema.String,
  content: Schema.optional(Schema.Union(Schema.String, Schema.Array(Schema.Union(TextBlock, ImageBlock)))),
  is_error: Schema.optional(Schema.Boolean),
  cache_control: Schema.optional(Schema.NullOr(CacheControl))
})
export const ThinkingBlock = Schema.Struct({ type: Schema.Literal("thinking"), thinking: Schema.String, signature: Schema.optional(Schema.String) })
export const RedactedThinkingBlock = Schema.Struct({ type: Schema.Literal("redacted_thinking"), data: Schema.String })

export const blockSchemas = {
  text: TextBlock,
  image: ImageBlock,
  document: DocumentBlock,
  tool_use: ToolUseBlock,
  tool_result: ToolResultBlock,
  thinking: ThinkingBlock,
  redacted_thinking: RedactedThinkingBlock
} as const

/** Block types of server-side tools and search results: refused. */
export const refusedBlockTypes = new Set(["server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result", "mcp_tool_use", "mcp_tool_result", "search_result", "container_upload"])

export const MessageParam = Schema.Struct({
  role: Schema.Literal("user", "assistant", "system"),
  content: Schema.Union(Schema.String, Schema.Array(JsonObject))
})

export const Tool = Schema.Struct({
  type: Schema.optional(Schema.NullOr(Schema.String)),
  name: Schema.String.pipe(Schema.pattern(/^[a-zA-Z0-9_-]{1,128}$/, { message: () => "a tool name is 1 to 128 letters, digits, _ or -" })),
  description: Schema.optional(Schema.String),
  input_schema: Schema.optional(JsonObject),
  cache_control: Schema.optional(Schema.NullOr(CacheControl))
})

export const ToolChoice = Schema.Struct({
  type: Schema.Literal("auto", "any", "none", "tool"),
  name: Schema.optional(Schema.String),
  disable_parallel_tool_use: Schema.optional(Schema.Boolean)
})

export const Thinking = Schema.Union(
  Schema.Struct({ type: Schema.Literal("enabled"), budget_tokens: Schema.Int }),
  Schema.Struct({ type: Schema.Literal("disabled") }),
  Schema.Struct({ type: Schema.Literal("adaptive") })
)

export const MessagesRequest = Schema.Struct({
  model: Schema.String.pipe(Schema.minLength(1)),
  max_tokens: Schema.Int.pipe(Schema.positive()),
  messages: Schema.Array(MessageParam),
  system: Schema.optional(Schema.Union(Schema.String, Schema.Array(TextBlock))),
  tools: Schema.optional(Schema.Array(JsonObject)),
  tool_choice: Schema.optional(ToolChoice),
  temperature: Schema.optional(Schema.Number.pipe(Schema.between(0, 1))),
  top_p: Schema.optional(Schema.Number.pipe(Schema.between(0, 1))),
  top_k: Schema.optional(Schema.Int.pipe(Schema.nonNegative())),
  stop_sequences: Schema.optional(Schema.Array(Schema.String)),
  stream: Schema.optional(Schema.Boolean),
  thinking: Schema.optional(Thinking),
  output_config: Schema.optional(
    Schema.Struct({
      effort: Schema.optional(Schema.String),
      format: Schema.optional(JsonObject)
    })
  ),
  mcp_servers: Schema.optional(Schema.Unknown),
  metadata: Schema.optional(Schema.Unknown)
})
export type MessagesRequest = typeof MessagesRequest.Type

/** The same shape decoded for count_tokens, where `max_tokens` is not required. */
export const CountTokensRequest = Schema.Struct({
  ...MessagesRequest.fields,
  max_tokens: Schema.optional(Schema.Int.pipe(Schema.positive()))
})
export type CountTokensRequest = typeof CountTokensRequest.Type
