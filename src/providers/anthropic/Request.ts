import type {
  AssistantPart,
  CacheControl,
  CanonicalRequest,
  FilePart,
  ImagePart,
  Message,
  TextPart,
  ToolChoice,
  ToolResultPart
} from "../../domain/Canonical.js"
import type { ProviderTarget } from "../Provider.js"
import { parseDataUrl } from "../DataUrl.js"
import { parseJsonText } from "../../domain/JsonDepth.js"

/** Messages API wire request built from a canonical request (the `anthropic` provider type). */

type Block = Record<string, unknown>

interface WireTurn {
  readonly role: "user" | "assistant"
  readonly content: Array<Block>
}

/** max_tokens when the request names none (the Messages API requires one). */
export const defaultMaxTokens = 8192

/** Thinking budget for a reasoning effort; undefined when thinking stays off. */
export const thinkingBudget = (effort: string | undefined): number | undefined => {
  if (effort === undefined || effort === "none") return undefined
  switch (effort) {
    case "low":
      return 2048
    case "medium":
      return 8192
    case "high":
      return 16384
    default:
      return 4096
  }
}

const cacheControl = (cache: CacheControl | undefined): Block | undefined =>
  cache === undefined ? undefined : cache.ttl === "1h" ? { type: "ephemeral", ttl: "1h" } : { type: "ephemeral" }

const withCache = (block: Block, cache: CacheControl | undefined): Block => {
  const control = cacheControl(cache)
  return control === undefined ? block : { ...block, cache_control: control }
}

const imageBlock = (part: ImagePart): Block => {
  const data = parseDataUrl(part.url)
  const source =
    data !== undefined
      ? { type: "base64", media_type: part.mediaType ?? data.mediaType, data: data.data }
      : { type: "url", url: part.url }
  return withCache({ type: "image", source }, part.cache)
}

const documentBlock = (part: FilePart): Block => {
  const data = parseDataUrl(part.data)
  const mediaType = data?.mediaType ?? part.mediaType
  let source: Block
  if (data === undefined) source = { type: "url", url: part.data }
  else if (mediaType.startsWith("text/")) {
    // the Messages API takes plain-text documents as text, not base64
    source = { type: "text", media_type: "text/plain", data: Buffer.from(data.data, "base64").toString("utf8") }
  } else source = { type: "base64", media_type: mediaType, data: data.data }
  const block: Block = { type: "document", source }
  if (part.filename !== undefined) block.title = part.filename
  return withCache(block, part.cache)
}

const textBlock = (part: TextPart): Block => withCache({ type: "text", text: part.text }, part.cache)

const parseToolInput = (args: string): Record<string, unknown> => {
  try {
    const value: unknown = parseJsonText(args)
    return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : {}
  } catch {
    return {}
  }
}

const assistantBlock = (part: AssistantPart): Block | undefined => {
  switch (part.type) {
    case "text":
      // the API refuses empty text blocks
      return part.text === "" ? undefined : textBlock(part)
    case "tool_call":
      return { type: "tool_use", id: part.id, name: part.name, input: parseToolInput(part.arguments) }
    case "reasoning":
      // signed and redacted thinking only from this family (spec 4.2); another family's signature is refused
      if (part.family !== "anthropic") return undefined
      if (part.redacted !== undefined) return { type: "redacted_thinking", data: part.redacted }
      // an unsigned thinking block would be refused upstream
      if (part.signature === undefined || part.signature === "") return undefined
      return { type: "thinking", thinking: part.text, signature: part.signature }
  }
}

const toolResultBlock = (part: ToolResultPart): Block => {
  const content = part.content.flatMap((c): Array<Block> =>
    c.type === "text" ? (c.text === "" ? [] : [textBlock(c)]) : [imageBlock(c)]
  )
  const block: Block = { type: "tool_result", tool_use_id: part.callId, content }
  if (part.isError === true) block.is_error = true
  return withCache(block, part.cache)
}

const wireTurn = (message: Message): WireTurn => {
  switch (message.role) {
    case "user":
      return {
        role: "user",
        content: message.parts.flatMap((p): Array<Block> => {
          switch (p.type) {
            case "text":
              return p.text === "" ? [] : [textBlock(p)]
            case "image":
              return [imageBlock(p)]
            case "file":
              return [documentBlock(p)]
          }
        })
      }
    case "assistant":
      return { role: "assistant", content: message.parts.flatMap((p): Array<Block> => {
          const block = assistantBlock(p)
          return block === undefined ? [] : [block]
        }) }
    case "tool":
      return { role: "user", content: message.parts.map(toolResultBlock) }
  }
}

/**
 * Canonical messages as Messages API turns: tool results become user turns, empty turns are
 * dropped and consecutive same-role turns merged (the API requires alternation). In a merged
 * user turn the tool_result blocks come first, as the API requires.
 */
export const wireMessages = (messages: ReadonlyArray<Message>): Array<WireTurn> => {
  const out: Array<{ role: "user" | "assistant"; content: Array<Block> }> = []
  for (const message of messages) {
    const turn = wireTurn(message)
    if (turn.content.length === 0) continue
    const last = out[out.length - 1]
    if (last !== undefined && last.role === turn.role) last.content.push(...turn.content)
    else out.push({ role: turn.role, content: [...turn.content] })
  }
  for (const turn of out) {
    if (turn.role !== "user") continue
    const results = turn.content.filter((b) => b.type === "tool_result")
    if (results.length > 0) turn.content = [...results, ...turn.content.filter((b) => b.type !== "tool_result")]
  }
  return out
}

const wireToolChoice = (choice: ToolChoice, parallel: boolean): Block => {
  const disable = parallel ? {} : { disable_parallel_tool_use: true }
  switch (choice.type) {
    case "auto":
      return { type: "auto", ...disable }
    case "none":
      return { type: "none" }
    case "required":
      return { type: "any", ...disable }
    case "tool":
      return { type: "tool", name: choice.name, ...disable }
  }
}

export const buildMessagesRequest = (target: ProviderTarget, request: CanonicalRequest): Record<string, unknown> => {
  let maxTokens = request.maxOutputTokens ?? defaultMaxTokens
  const body: Record<string, unknown> = { model: target.model, max_tokens: maxTokens }
  const system = request.system.filter((p) => p.text !== "").map(textBlock)
  if (system.length > 0) body.system = system
  body.messages = wireMessages(request.messages)
  if (request.tools.length > 0) {
    body.tools = request.tools.map((t) =>
      withCache(
        {
          name: t.name,
          ...(t.description !== undefined ? { description: t.description } : {}),
          input_schema: t.parameters
        },
        t.cache
      )
    )
    body.tool_choice = wireToolChoice(request.toolChoice, request.parallelToolCalls)
  }
  const s = request.sampling
  if (s.temperature !== undefined) body.temperature = s.temperature
  if (s.topP !== undefined) body.top_p = s.topP
  if (s.topK !== undefined) body.top_k = s.topK
  if (s.stop !== undefined && s.stop.length > 0) body.stop_sequences = s.stop
  const budget = thinkingBudget(target.reasoningEffort)
  if (budget !== undefined) {
    if (maxTokens <= budget) maxTokens = budget + 1024
    body.max_tokens = maxTokens
    body.thinking = { type: "enabled", budget_tokens: budget }
  }
  if (request.stream) body.stream = true
  if (target.params !== undefined) Object.assign(body, target.params)
  return body
}
