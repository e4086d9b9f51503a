import { Either } from "effect"
import type { AssistantPart, CacheControl, CanonicalRequest, Message, TextPart, ToolChoice, ToolDefinition, ToolResultPart, UserPart } from "../../domain/Canonical.js"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import { respondToolName } from "../../domain/Structured.js"
import { decodeAt } from "../Decode.js"
import { fileNotFound, type FileRef, type ResolvedFiles } from "../FileParts.js"
import { applyCaching } from "./Caching.js"
import { blockSchemas, CacheControl as WireCacheControl, refusedBlockTypes, Tool, type CountTokensRequest } from "./Schema.js"

/** Translation of a decoded Messages request into the canonical request (spec 4.2). */

type Result<A> = Either.Either<A, GatewayError>
type Block = Readonly<Record<string, unknown>>
type MediaBlock = typeof blockSchemas.image.Type | typeof blockSchemas.document.Type

/** The Messages error object has no param: the field is named in the message. */
const refuse = (param: string, why: string) => Errors.invalidRequest("invalid_request_error", `${param}: ${why}`, { param })

const decoders = {
  text: decodeAt(blockSchemas.text),
  image: decodeAt(blockSchemas.image),
  document: decodeAt(blockSchemas.document),
  tool_use: decodeAt(blockSchemas.tool_use),
  tool_result: decodeAt(blockSchemas.tool_result),
  thinking: decodeAt(blockSchemas.thinking),
  redacted_thinking: decodeAt(blockSchemas.redacted_thinking)
}
const decodeTool = decodeAt(Tool)

type WireCache = typeof WireCacheControl.Type | null | undefined

const cacheOf = (value: WireCache): CacheControl | undefined => (value == null ? undefined : { ttl: value.ttl === "1h" ? "1h" : "5m" })
const withCache = <A extends object>(part: A, value: WireCache): A => {
  const cache = cacheOf(value)
  return cache === undefined ? part : { ...part, cache }
}

/** Every stored file the messages name (`image`/`document` blocks with a `file` source, in tool results too). */
export const messagesFileRefs = (wire: CountTokensRequest): Array<FileRef> => {
  const refs: Array<FileRef> = []
  const visit = (block: unknown, at: string) => {
    if (typeof block !== "object" || block === null) return
    const b = block as { type?: unknown; source?: { type?: unknown; file_id?: unknown }; content?: unknown }
    if ((b.type === "image" || b.type === "document") && b.source?.type === "file" && typeof b.source.file_id === "string") refs.push({ id: b.source.file_id, param: `${at}.source.file_id` })
    if (b.type === "tool_result" && Array.isArray(b.content)) b.content.forEach((c, k) => visit(c, `${at}.content.${k}`))
  }
  wire.messages.forEach((m, i) => {
    if (Array.isArray(m.content)) m.content.forEach((block, j) => visit(block, `messages.${i}.content.${j}`))
  })
  return refs
}

/** A stored file as the block asks: an image block takes an image; a document block a PDF or a text file. */
const storedPart = (block: MediaBlock, at: string, fileId: string, files: ResolvedFiles): Result<UserPart | TextPart> => {
  const stored = files.get(fileId)
  if (stored === undefined) return Either.left(fileNotFound("messages", fileId, `${at}.source.file_id`))
  if (block.type === "image" && stored.kind !== "image") return Either.left(refuse(`${at}.source.file_id`, `${fileId} is not an image (it is ${stored.record.mimeType})`))
  if (block.type === "document" && stored.kind === "image") return Either.left(refuse(`${at}.source.file_id`, `${fileId} is an image; send it in an image block`))
  return Either.right(withCache(stored.part, block.cache_control))
}

const mediaPart = (block: MediaBlock, at: string, files: ResolvedFiles): Result<UserPart | TextPart> => {
  if (block.source.type === "file") return storedPart(block, at, block.source.file_id, files)
  if (block.type === "image") {
    const source = block.source
    if (source.type === "url") return Either.right(withCache({ type: "image" as const, url: source.url }, block.cache_control))
    return Either.right(withCache({ type: "image" as const, url: `data:${source.media_type};base64,${source.data}`, ...(source.media_type ? { mediaType: source.media_type } : {}) }, block.cache_control))
  }
  const source = block.source
  if (source.type === "text") return Either.right(withCache({ type: "text" as const, text: source.data }, block.cache_control))
  if (source.type === "url") return Either.left(refuse(`${at}.source`, "documents by URL are not supported; send base64, text or a file"))
  return Either.right(withCache({ type: "file" as const, mediaType: source.media_type, data: `data:${source.media_type};base64,${source.data}` }, block.cache_control))
}

export interface DecodedMessages {
  readonly request: CanonicalRequest
  /** the request before the caching rules: host tools are added to it, then the rules applied */
  readonly uncached: CanonicalRequest
  /** the request asked for thinking (enabled or adaptive) */
  readonly thinking: boolean
  /** the reasoning level asked for: `output_config.effort`, else from the thinking budget */
  readonly level?: string
  readonly stopSequences: ReadonlyArray<string>
}

const levelOf = (wire: CountTokensRequest): string | undefined => {
  if (wire.output_config?.effort) return wire.output_config.effort
  if (wire.thinking?.type === "enabled") return wire.thinking.budget_tokens <= 4096 ? "low" : wire.thinking.budget_tokens <= 16384 ? "medium" : "high"
  if (wire.thinking?.type === "adaptive") return "medium"
  return undefined
}

/** Decode a Messages request; `maxTools` bounds the tools. */
export const decodeMessages = (
  wire: CountTokensRequest,
  options: {
    readonly maxTools: number
    readonly stream: boolean
    readonly files?: ResolvedFiles
    /** a name the app's host tools may hold: `tool_choice` may name it undeclared (HostTools checks it is offered) */
    readonly hostTool?: (name: string) => boolean
  }
): Result<DecodedMessages> => {
  const files = options.files ?? new Map()
  if (wire.mcp_servers !== undefined && wire.mcp_servers !== null) return Either.left(refuse("mcp_servers", "MCP servers are not supported"))
  if (wire.thinking?.type === "enabled") {
    if (wire.thinking.budget_tokens < 1024) return Either.left(refuse("thinking.budget_tokens", "must be at least 1024"))
    if (wire.max_tokens !== undefined && wire.thinking.budget_tokens >= wire.max_tokens) return Either.left(refuse("thinking.budget_tokens", "must be less than max_tokens"))
  }
  // tools: custom only
  const tools: Array<ToolDefinition> = []
  for (const [i, raw] of (wire.tools ?? []).entries()) {
    const type = raw.type
    if (type !== undefined && type !== null && type !== "custom") return Either.left(refuse(`tools.${i}.type`, `tool type '${String(type)}' is not supported; only custom tools`))
    const tool = decodeTool(raw, `tools.${i}`)
    if (Either.isLeft(tool)) return Either.left(tool.left)
    if (tools.some((t) => t.name === tool.right.name)) return Either.left(refuse(`tools.${i}.name`, `duplicate tool name ${tool.right.name}`))
    tools.push({ name: tool.right.name, ...(tool.right.description ? { description: tool.right.description } : {}), parameters: tool.right.input_schema ?? { type: "object", properties: {} } })
  }
  if (tools.length > options.maxTools) return Either.left(refuse("tools", `at most ${options.maxTools} tools are allowed`))
  // tool choice
  const choice = wire.tool_choice
  let toolChoice: ToolChoice = { type: "auto" }
  if (choice?.type === "any") toolChoice = { type: "required" }
  else if (choice?.type === "none") toolChoice = { type: "none" }
  else if (choice?.type === "tool") {
    if (!choice.name || (!tools.some((t) => t.name === choice.name) && options.hostTool?.(choice.name) !== true)) return Either.left(refuse("tool_choice.name", `no tool named ${choice.name ?? ""} in tools`))
    toolChoice = { type: "tool", name: choice.name }
  }
  // structured output
  let structured: CanonicalRequest["structured"]
  const format = wire.output_config?.format
  if (format !== undefined) {
    if (format.type !== "json_schema" || typeof format.schema !== "object" || format.schema === null) {
      return Either.left(refuse("output_config.format", "only {type: json_schema, schema} is supported"))
    }
    if (tools.some((t) => t.name === respondToolName)) return Either.left(refuse("tools", `the name ${respondToolName} is reserved with output_config.format`))
    if (toolChoice.type === "tool") return Either.left(refuse("tool_choice", "a named tool cannot be combined with output_config.format"))
    structured = { name: "response", schema: format.schema as Record<string, unknown>, jsonObject: false }
  }
  // system, lifted system entries after it
  const system: Array<TextPart> = []
  if (typeof wire.system === "string") system.push({ type: "text", text: wire.system })
  else for (const block of wire.system ?? []) system.push(withCache({ type: "text" as const, text: block.text }, block.cache_control))
  const messages: Array<Message> = []
  const calls = new Map<string, string>()
  for (let i = 0; i < wire.messages.length; i++) {
    const m = wire.messages[i]
    const at = `messages.${i}`
    const blocks: ReadonlyArray<Block> = typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content
    if (m.role === "system") {
      for (const [j, block] of blocks.entries()) {
        if (block.type !== "text" || typeof block.text !== "string") return Either.left(refuse(`${at}.content.${j}`, "a system entry takes text only"))
        system.push({ type: "text", text: block.text })
      }
      continue
    }
    const user: Array<UserPart> = []
    const results: Array<ToolResultPart> = []
    const assistant: Array<AssistantPart> = []
    for (let j = 0; j < blocks.length; j++) {
      const block = blocks[j]
      const where = `${at}.content.${j}`
      const type = typeof block.type === "string" ? block.type : ""
      if (refusedBlockTypes.has(type)) return Either.left(refuse(`${where}.type`, `content blocks of type ${type} are not supported`))
      if (!(type in decoders)) return Either.left(refuse(`${where}.type`, `unknown content block type '${type}'`))
      // each block decoded once by its type's Schema; the translation reads the decoded value
      switch (type) {
        case "text": {
          const text = decoders.text(block, where)
          if (Either.isLeft(text)) return Either.left(text.left)
          if (m.role === "assistant") assistant.push({ type: "text", text: text.right.text })
          else user.push(withCache({ type: "text" as const, text: text.right.text }, text.right.cache_control))
          break
        }
        case "image":
        case "document": {
          const media: Result<MediaBlock> = type === "image" ? decoders.image(block, where) : decoders.document(block, where)
          if (Either.isLeft(media)) return Either.left(media.left)
          if (m.role === "assistant") return Either.left(refuse(`${where}.type`, `${type} blocks belong in user turns`))
          const part = mediaPart(media.right, where, files)
          if (Either.isLeft(part)) return Either.left(part.left)
          user.push(part.right)
          break
        }
        case "tool_use": {
          const use = decoders.tool_use(block, where)
          if (Either.isLeft(use)) return Either.left(use.left)
          if (m.role !== "assistant") return Either.left(refuse(`${where}.type`, "tool_use blocks belong in assistant turns"))
          calls.set(use.right.id, use.right.name)
          assistant.push({ type: "tool_call", id: use.right.id, name: use.right.name, arguments: JSON.stringify(use.right.input ?? {}) })
          break
        }
        case "tool_result": {
          const decoded = decoders.tool_result(block, where)
          if (Either.isLeft(decoded)) return Either.left(decoded.left)
          const result = decoded.right
          const id = result.tool_use_id
          const name = calls.get(id)
          if (name === undefined) return Either.left(refuse(`${where}.tool_use_id`, `no earlier tool_use has id ${id}`))
          const parts: Array<TextPart | Extract<UserPart, { type: "image" }>> = []
          if (typeof result.content === "string") parts.push({ type: "text", text: result.content })
          else if (result.content !== undefined) {
            for (const [k, c] of result.content.entries()) {
              if (c.type === "text") parts.push({ type: "text", text: c.text })
              else {
                const media = mediaPart(c, `${where}.content.${k}`, files)
                if (Either.isLeft(media)) return Either.left(media.left)
                if (media.right.type === "image") parts.push(media.right)
              }
            }
          }
          results.push(withCache({ type: "tool_result" as const, callId: id, name, content: parts, ...(result.is_error === true ? { isError: true } : {}) }, result.cache_control))
          break
        }
        case "thinking": {
          const thought = decoders.thinking(block, where)
          if (Either.isLeft(thought)) return Either.left(thought.left)
          const { signature, thinking } = thought.right
          if (m.role === "assistant") assistant.push({ type: "reasoning", text: thinking, ...(signature ? { signature, family: "anthropic" as const } : {}) })
          break
        }
        case "redacted_thinking": {
          const redacted = decoders.redacted_thinking(block, where)
          if (Either.isLeft(redacted)) return Either.left(redacted.left)
          if (m.role === "assistant") assistant.push({ type: "reasoning", text: "", redacted: redacted.right.data, family: "anthropic" })
          break
        }
      }
    }
    if (m.role === "assistant") {
      if (assistant.length > 0) messages.push({ role: "assistant", parts: assistant })
    } else {
      if (results.length > 0) messages.push({ role: "tool", parts: results })
      if (user.length > 0) messages.push({ role: "user", parts: user })
    }
  }
  const thinking = wire.thinking?.type === "enabled" || wire.thinking?.type === "adaptive"
  const level = levelOf(wire)
  const request: CanonicalRequest = {
    system,
    messages,
    tools,
    toolChoice,
    sampling: {
      ...(wire.temperature !== undefined ? { temperature: wire.temperature } : {}),
      ...(wire.top_p !== undefined ? { topP: wire.top_p } : {}),
      ...(wire.top_k !== undefined ? { topK: wire.top_k } : {})
    },
    ...(wire.max_tokens !== undefined ? { maxOutputTokens: wire.max_tokens } : {}),
    ...(level !== undefined ? { reasoningEffort: level } : {}),
    ...(structured !== undefined ? { structured } : {}),
    parallelToolCalls: wire.tool_choice?.disable_parallel_tool_use !== true,
    stream: options.stream
  }
  return Either.right({ request: applyCaching(request), uncached: request, thinking, ...(level !== undefined ? { level } : {}), stopSequences: wire.stop_sequences ?? [] })
}
