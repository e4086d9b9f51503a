import { Schema } from "effect"

/**
 * Gemini-style request codec (spec 4.3). Every field is read in camelCase and snake_case: the body
 * is first rewritten to camelCase by `camelKeys`, which leaves caller data alone (function
 * arguments and responses, JSON Schemas given as is, property names of Gemini schemas).
 */

/** Keys whose values are caller data, copied as they are. */
const opaque = new Set(["args", "response", "parametersJsonSchema", "responseJsonSchema", "example", "default", "enum", "data", "text", "thoughtSignature"])

const camel = (key: string): string => (key.includes("_") ? key.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase()) : key)

/**
 * A copy of a request body with snake_case keys spelled in camelCase. When both spellings are
 * present the camelCase one wins. `properties` maps of Gemini schemas keep their keys (they are
 * the caller's property names) and have their values rewritten.
 */
export const camelKeys = (value: unknown, depth = 0): unknown => {
  if (depth > 64 || typeof value !== "object" || value === null) return value
  if (Array.isArray(value)) return value.map((v) => camelKeys(v, depth + 1))
  const out: Record<string, unknown> = {}
  const record = value as Record<string, unknown>
  for (const key of Object.keys(record)) {
    const name = camel(key)
    // the camelCase spelling wins over a snake_case one
    if (name !== key && Object.prototype.hasOwnProperty.call(record, name)) continue
    const v = record[key]
    if (opaque.has(name)) out[name] = v
    else if (name === "properties" && typeof v === "object" && v !== null && !Array.isArray(v)) {
      out[name] = Object.fromEntries(Object.entries(v).map(([k, sub]) => [k, camelKeys(sub, depth + 1)]))
    } else out[name] = camelKeys(v, depth + 1)
  }
  return out
}

const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown })

export const Content = Schema.Struct({
  role: Schema.optional(Schema.NullOr(Schema.String)),
  parts: Schema.Array(JsonObject)
})
export type Content = typeof Content.Type

export const InlineData = Schema.Struct({ mimeType: Schema.String, data: Schema.String })
export const FileData = Schema.Struct({ fileUri: Schema.String, mimeType: Schema.optional(Schema.NullOr(Schema.String)) })
export const FunctionCall = Schema.Struct({
  name: Schema.String,
  args: Schema.optional(Schema.NullOr(JsonObject)),
  id: Schema.optional(Schema.NullOr(Schema.String))
})
export const FunctionResponse = Schema.Struct({
  name: Schema.String,
  response: Schema.optional(Schema.NullOr(JsonObject)),
  id: Schema.optional(Schema.NullOr(Schema.String))
})

export const FunctionDeclaration = Schema.Struct({
  name: Schema.String.pipe(Schema.pattern(/^[a-zA-Z_][a-zA-Z0-9_.:-]{0,127}$/, { message: () => "a function name is 1 to 128 letters, digits, _ . : or -, not starting with a digit" })),
  description: Schema.optional(Schema.NullOr(Schema.String)),
  parameters: Schema.optional(Schema.Unknown),
  parametersJsonSchema: Schema.optional(Schema.Unknown)
})

export const Tool = Schema.Struct({ functionDeclarations: Schema.optional(Schema.NullOr(Schema.Array(JsonObject))) })

/** Tool kinds other than function declarations: refused naming the field (spec 7.4). */
export const refusedToolKinds = ["googleSearch", "googleSearchRetrieval", "codeExecution", "urlContext", "retrieval", "fileSearch", "googleMaps", "computerUse", "enterpriseWebSearch", "mcpServers"] as const

/** Part kinds the gateway never takes (spec 7.4). */
export const refusedPartKinds = ["executableCode", "codeExecutionResult", "videoMetadata"] as const

export const FunctionCallingConfig = Schema.Struct({
  mode: Schema.optional(Schema.NullOr(Schema.Literal("AUTO", "ANY", "NONE", "VALIDATED", "MODE_UNSPECIFIED"))),
  allowedFunctionNames: Schema.optional(Schema.NullOr(Schema.Array(Schema.String)))
})

export const ToolConfig = Schema.Struct({ functionCallingConfig: Schema.optional(Schema.NullOr(FunctionCallingConfig)) })

const Count = Schema.Number.pipe(Schema.int(), Schema.nonNegative())

export const ThinkingConfig = Schema.Struct({
  thinkingBudget: Schema.optional(Schema.NullOr(Schema.Number.pipe(Schema.int(), Schema.greaterThanOrEqualTo(-1)))),
  thinkingLevel: Schema.optional(Schema.NullOr(Schema.String)),
  includeThoughts: Schema.optional(Schema.NullOr(Schema.Boolean))
})

export const GenerationConfig = Schema.Struct({
  temperature: Schema.optional(Schema.NullOr(Schema.Number)),
  topP: Schema.optional(Schema.NullOr(Schema.Number)),
  topK: Schema.optional(Schema.NullOr(Schema.Number)),
  seed: Schema.optional(Schema.NullOr(Schema.Number.pipe(Schema.int()))),
  maxOutputTokens: Schema.optional(Schema.NullOr(Count.pipe(Schema.positive()))),
  presencePenalty: Schema.optional(Schema.NullOr(Schema.Number)),
  frequencyPenalty: Schema.optional(Schema.NullOr(Schema.Number)),
  stopSequences: Schema.optional(Schema.NullOr(Schema.Array(Schema.String))),
  candidateCount: Schema.optional(Schema.NullOr(Count)),
  responseMimeType: Schema.optional(Schema.NullOr(Schema.String)),
  responseSchema: Schema.optional(Schema.Unknown),
  responseJsonSchema: Schema.optional(Schema.Unknown),
  responseModalities: Schema.optional(Schema.NullOr(Schema.Array(Schema.String))),
  responseLogprobs: Schema.optional(Schema.NullOr(Schema.Boolean)),
  thinkingConfig: Schema.optional(Schema.NullOr(ThinkingConfig))
})
export type GenerationConfig = typeof GenerationConfig.Type

export const GenerateContentRequest = Schema.Struct({
  contents: Schema.Array(Content),
  systemInstruction: Schema.optional(Schema.NullOr(Schema.Union(Schema.String, Content))),
  tools: Schema.optional(Schema.NullOr(Schema.Array(JsonObject))),
  toolConfig: Schema.optional(Schema.NullOr(ToolConfig)),
  generationConfig: Schema.optional(Schema.NullOr(GenerationConfig)),
  cachedContent: Schema.optional(Schema.Unknown)
})
export type GenerateContentRequest = typeof GenerateContentRequest.Type

/** `:countTokens` takes the contents at the top level, or a whole request in `generateContentRequest`. */
export const CountTokensRequest = Schema.Struct({
  contents: Schema.optional(Schema.NullOr(Schema.Array(Content))),
  generateContentRequest: Schema.optional(Schema.NullOr(JsonObject))
})
