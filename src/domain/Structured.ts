import type { Answer, CanonicalRequest, JsonSchema, StructuredOutput, ToolDefinition } from "./Canonical.js"
import { Errors, type GatewayError } from "./Errors.js"
import { parseJsonText } from "./JsonDepth.js"

/**
 * Structured output through the forced `respond` tool (spec section 1, rule 5): the caller's schema
 * becomes the tool's input schema and the tool input becomes the answer text. Without a `respond`
 * call, final text that passes a small shape check is taken instead (the "text fallback").
 */

export const respondToolName = "respond"

const isObjectSchema = (schema: JsonSchema) => schema.type === "object" || (schema.type === undefined && typeof schema.properties === "object")

/** Whether the schema is carried inside one `value` property (non-object schemas). */
export const isWrapped = (structured: StructuredOutput) => !isObjectSchema(structured.schema)

export const respondTool = (structured: StructuredOutput): ToolDefinition => ({
  name: respondToolName,
  description: "Give the final answer by calling this tool with arguments that match its schema.",
  parameters: isWrapped(structured)
    ? { type: "object", properties: { value: structured.schema }, required: ["value"] }
    : structured.schema
})

/** The request as sent to the model: `respond` added and forced unless caller tools may be called. */
export const withRespondTool = (request: CanonicalRequest): CanonicalRequest => {
  const structured = request.structured
  if (structured === undefined) return request
  const callerTools = request.toolChoice.type === "none" ? [] : request.tools
  return {
    ...request,
    tools: [...callerTools, respondTool(structured)],
    toolChoice: callerTools.length === 0 ? { type: "tool", name: respondToolName } : { type: "required" }
  }
}

const typeMatches = (value: unknown, type: unknown): boolean => {
  if (Array.isArray(type)) return type.some((t) => typeMatches(value, t))
  switch (type) {
    case "object":
      return typeof value === "object" && value !== null && !Array.isArray(value)
    case "array":
      return Array.isArray(value)
    case "string":
      return typeof value === "string"
    case "integer":
      return typeof value === "number" && Number.isInteger(value)
    case "number":
      return typeof value === "number"
    case "boolean":
      return typeof value === "boolean"
    case "null":
      return value === null
    default:
      return true
  }
}

/** The small check of spec 4.1: top-level type, required keys, types of top-level properties. */
export const matchesShallow = (value: unknown, schema: JsonSchema): boolean => {
  if (schema.type !== undefined && !typeMatches(value, schema.type)) return false
  if (typeof value !== "object" || value === null || Array.isArray(value)) return schema.type !== undefined || !isObjectSchema(schema)
  const record = value as Record<string, unknown>
  if (Array.isArray(schema.required) && !schema.required.every((k) => typeof k !== "string" || k in record)) return false
  const properties = schema.properties
  if (typeof properties === "object" && properties !== null) {
    for (const [key, sub] of Object.entries(properties as Record<string, unknown>)) {
      if (!(key in record) || typeof sub !== "object" || sub === null) continue
      const subType = (sub as JsonSchema).type
      if (subType !== undefined && !typeMatches(record[key], subType)) return false
    }
  }
  return true
}

/** Remove one surrounding markdown code fence, if the text is fenced. */
export const stripFence = (text: string): string => {
  const match = /^\s*```[a-zA-Z0-9_-]*[ \t]*\r?\n([\s\S]*?)\r?\n?```\s*$/.exec(text)
  return match === null ? text.trim() : match[1].trim()
}

export interface StructuredResult {
  readonly answer: Answer
  /** the answer came from final text, not a `respond` call */
  readonly fallback: boolean
}

const parse = (text: string): { readonly ok: true; readonly value: unknown } | { readonly ok: false } => {
  try {
    return { ok: true, value: parseJsonText(text) }
  } catch {
    return { ok: false }
  }
}

/**
 * Turn a folded answer into the structured answer: a `respond` call's input as the text, or the
 * final text when it passes the check, or 502 `structured_output_missing`. A turn that calls one of
 * the caller's tools is returned as it is.
 */
export const resolveStructured = (answer: Answer, structured: StructuredOutput): { readonly _tag: "ok"; readonly result: StructuredResult } | { readonly _tag: "error"; readonly error: GatewayError } => {
  const respond = answer.toolCalls.find((c) => c.name === respondToolName)
  if (respond !== undefined) {
    let text = respond.arguments
    if (isWrapped(structured)) {
      const parsed = parse(text)
      if (parsed.ok && typeof parsed.value === "object" && parsed.value !== null && "value" in parsed.value) {
        text = JSON.stringify((parsed.value as { value: unknown }).value)
      }
    }
    return { _tag: "ok", result: { answer: { ...answer, text, toolCalls: [], finishReason: answer.finishReason === "tool_calls" ? "stop" : answer.finishReason }, fallback: false } }
  }
  if (answer.toolCalls.length > 0) return { _tag: "ok", result: { answer, fallback: false } }
  const candidate = stripFence(answer.text)
  const parsed = parse(candidate)
  if (parsed.ok && matchesShallow(parsed.value, structured.schema)) {
    return { _tag: "ok", result: { answer: { ...answer, text: candidate }, fallback: true } }
  }
  return {
    _tag: "error",
    error: Errors.upstream("structured_output_missing", "The model did not return JSON matching the requested schema")
  }
}
