import { Schema } from "effect"

/** Responses-style request codec (spec 4.1, 2.1). Items are decoded one by one by their type. */

const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown })

export const TextPart = Schema.Struct({ type: Schema.Literal("input_text", "output_text", "text"), text: Schema.String })
export const RefusalPart = Schema.Struct({ type: Schema.Literal("refusal"), refusal: Schema.String })
export const InputImagePart = Schema.Struct({
  type: Schema.Literal("input_image"),
  image_url: Schema.optional(Schema.NullOr(Schema.String)),
  file_id: Schema.optional(Schema.NullOr(Schema.String)),
  detail: Schema.optional(Schema.NullOr(Schema.String))
})
export const InputFilePart = Schema.Struct({
  type: Schema.Literal("input_file"),
  file_data: Schema.optional(Schema.NullOr(Schema.String)),
  file_url: Schema.optional(Schema.NullOr(Schema.String)),
  file_id: Schema.optional(Schema.NullOr(Schema.String)),
  filename: Schema.optional(Schema.NullOr(Schema.String))
})
/** chat-style image part, also accepted */
export const ChatImagePart = Schema.Struct({
  type: Schema.Literal("image_url"),
  image_url: Schema.Union(Schema.String, Schema.Struct({ url: Schema.String, detail: Schema.optional(Schema.String) }))
})
export const ContentPart = Schema.Union(TextPart, RefusalPart, InputImagePart, InputFilePart, ChatImagePart)
export type ContentPart = typeof ContentPart.Type

export const MessageItem = Schema.Struct({
  type: Schema.optional(Schema.Literal("message")),
  id: Schema.optional(Schema.String),
  role: Schema.Literal("user", "assistant", "system", "developer"),
  content: Schema.Union(Schema.String, Schema.Array(ContentPart)),
  status: Schema.optional(Schema.String)
})
export type MessageItem = typeof MessageItem.Type

export const FunctionCallItem = Schema.Struct({
  type: Schema.Literal("function_call"),
  id: Schema.optional(Schema.String),
  call_id: Schema.String,
  name: Schema.String,
  namespace: Schema.optional(Schema.String),
  arguments: Schema.String,
  status: Schema.optional(Schema.String)
})
export type FunctionCallItem = typeof FunctionCallItem.Type

const OutputValue = Schema.Union(Schema.String, Schema.Array(ContentPart))

export const FunctionCallOutputItem = Schema.Struct({
  type: Schema.Literal("function_call_output"),
  id: Schema.optional(Schema.String),
  call_id: Schema.String,
  output: OutputValue,
  status: Schema.optional(Schema.String)
})

export const CustomToolCallItem = Schema.Struct({
  type: Schema.Literal("custom_tool_call"),
  id: Schema.optional(Schema.String),
  call_id: Schema.String,
  name: Schema.String,
  namespace: Schema.optional(Schema.String),
  input: Schema.String,
  status: Schema.optional(Schema.String)
})

export const CustomToolCallOutputItem = Schema.Struct({
  type: Schema.Literal("custom_tool_call_output"),
  id: Schema.optional(Schema.String),
  call_id: Schema.String,
  output: OutputValue
})

export const AdditionalToolsItem = Schema.Struct({
  type: Schema.Literal("additional_tools"),
  id: Schema.optional(Schema.String),
  role: Schema.optional(Schema.String),
  tools: Schema.Array(JsonObject)
})

export const ItemReference = Schema.Struct({ type: Schema.Literal("item_reference"), id: Schema.String })

export const ReasoningItem = Schema.Struct({ type: Schema.Literal("reasoning") })

/** The item schema for an input item's `type` (a message may omit it). */
export const itemSchemas = {
  message: MessageItem,
  function_call: FunctionCallItem,
  function_call_output: FunctionCallOutputItem,
  custom_tool_call: CustomToolCallItem,
  custom_tool_call_output: CustomToolCallOutputItem,
  additional_tools: AdditionalToolsItem,
  item_reference: ItemReference,
  reasoning: ReasoningItem
} as const

export const FunctionTool = Schema.Struct({
  type: Schema.Literal("function"),
  name: Schema.String.pipe(Schema.pattern(/^[a-zA-Z0-9_.-]{1,128}$/, { message: () => "a tool name is 1 to 128 letters, digits, _, . or -" })),
  description: Schema.optional(Schema.NullOr(Schema.String)),
  parameters: Schema.optional(Schema.NullOr(JsonObject)),
  strict: Schema.optional(Schema.NullOr(Schema.Boolean))
})
export type FunctionTool = typeof FunctionTool.Type

export const CustomTool = Schema.Struct({
  type: Schema.Literal("custom"),
  name: Schema.String.pipe(Schema.pattern(/^[a-zA-Z0-9_.-]{1,128}$/, { message: () => "a tool name is 1 to 128 letters, digits, _, . or -" })),
  description: Schema.optional(Schema.NullOr(Schema.String)),
  format: Schema.optional(Schema.NullOr(JsonObject))
})
export type CustomTool = typeof CustomTool.Type

export const NamespaceTool = Schema.Struct({
  type: Schema.Literal("namespace"),
  name: Schema.String.pipe(Schema.pattern(/^[a-zA-Z0-9_.-]{1,128}$/, { message: () => "a namespace name is 1 to 128 letters, digits, _, . or -" })),
  description: Schema.optional(Schema.NullOr(Schema.String)),
  tools: Schema.Array(JsonObject)
})

export const ToolChoice = Schema.Union(
  Schema.Literal("auto", "none", "required"),
  Schema.Struct({ type: Schema.String, name: Schema.optional(Schema.String), namespace: Schema.optional(Schema.String) })
)

export const TextFormat = Schema.Union(
  Schema.Struct({ type: Schema.Literal("text") }),
  Schema.Struct({ type: Schema.Literal("json_object") }),
  Schema.Struct({
    type: Schema.Literal("json_schema"),
    name: Schema.optional(Schema.String),
    schema: Schema.optional(JsonObject),
    description: Schema.optional(Schema.String),
    strict: Schema.optional(Schema.NullOr(Schema.Boolean))
  })
)

export const ResponsesRequest = Schema.Struct({
  model: Schema.String.pipe(Schema.minLength(1)),
  input: Schema.optional(Schema.Union(Schema.String, Schema.Array(Schema.Unknown))),
  instructions: Schema.optional(Schema.NullOr(Schema.String)),
  tools: Schema.optional(Schema.NullOr(Schema.Array(JsonObject))),
  tool_choice: Schema.optional(Schema.NullOr(ToolChoice)),
  text: Schema.optional(Schema.NullOr(Schema.Struct({ format: Schema.optional(Schema.NullOr(TextFormat)), verbosity: Schema.optional(Schema.Unknown) }))),
  max_output_tokens: Schema.optional(Schema.NullOr(Schema.Int.pipe(Schema.positive()))),
  temperature: Schema.optional(Schema.NullOr(Schema.Number.pipe(Schema.between(0, 2)))),
  top_p: Schema.optional(Schema.NullOr(Schema.Number.pipe(Schema.between(0, 1)))),
  reasoning: Schema.optional(Schema.NullOr(Schema.Struct({ effort: Schema.optional(Schema.NullOr(Schema.String)), summary: Schema.optional(Schema.Unknown) }))),
  stream: Schema.optional(Schema.NullOr(Schema.Boolean)),
  parallel_tool_calls: Schema.optional(Schema.NullOr(Schema.Boolean)),
  store: Schema.optional(Schema.NullOr(Schema.Boolean)),
  previous_response_id: Schema.optional(Schema.NullOr(Schema.String)),
  user: Schema.optional(Schema.NullOr(Schema.String)),
  safety_identifier: Schema.optional(Schema.NullOr(Schema.String)),
  /** the client's conversation name: keeps a conversation on one target with affinity */
  prompt_cache_key: Schema.optional(Schema.NullOr(Schema.String)),
  metadata: Schema.optional(Schema.Unknown),
  // refused when present with a value (spec 7.2)
  conversation: Schema.optional(Schema.Unknown),
  background: Schema.optional(Schema.NullOr(Schema.Boolean)),
  prompt: Schema.optional(Schema.Unknown),
  top_logprobs: Schema.optional(Schema.Unknown),
  truncation: Schema.optional(Schema.NullOr(Schema.String))
})
export type ResponsesRequest = typeof ResponsesRequest.Type
