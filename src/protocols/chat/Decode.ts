import { Either } from "effect"
import type { AssistantPart, CanonicalRequest, Message, TextPart, ToolChoice, ToolDefinition, ToolResultPart, UserPart } from "../../domain/Canonical.js"
import { Errors, GatewayError } from "../../domain/Errors.js"
import { respondToolName } from "../../domain/Structured.js"
import { fileNotFound, type FileRef, type ResolvedFiles } from "../FileParts.js"
import type { ChatMessage, ChatRequest, CompletionRequest, UserPart as WireUserPart } from "./Schema.js"

/** Translation of a decoded chat-completions request into the canonical request. */

const textOf = (content: string | ReadonlyArray<{ readonly text: string }>) => (typeof content === "string" ? content : content.map((p) => p.text).join(""))

const dataUrlType = (url: string): string | undefined => /^data:([^;,]+)[;,]/.exec(url)?.[1]

/** Every stored file a chat request names (`file` parts with `file.file_id`), to resolve before decoding. */
export const chatFileRefs = (wire: ChatRequest): Array<FileRef> => {
  const refs: Array<FileRef> = []
  wire.messages.forEach((m, i) => {
    if (m.role !== "user" || typeof m.content === "string") return
    m.content.forEach((p, j) => {
      if (p.type === "file" && p.file.file_id !== undefined) refs.push({ id: p.file.file_id, param: `messages.${i}.content.${j}.file.file_id` })
    })
  })
  return refs
}

const userPart = (part: WireUserPart, at: string, files: ResolvedFiles): UserPart | GatewayError => {
  switch (part.type) {
    case "text":
      return { type: "text", text: part.text }
    case "image_url":
      return {
        type: "image",
        url: part.image_url.url,
        ...(part.image_url.detail !== undefined ? { detail: part.image_url.detail } : {}),
        ...(dataUrlType(part.image_url.url) !== undefined ? { mediaType: dataUrlType(part.image_url.url)! } : {})
      }
    case "file": {
      if (part.file.file_id !== undefined) {
        // any stored file: image as an image part, PDF as a file part, text as text
        const stored = files.get(part.file.file_id)
        return stored === undefined ? fileNotFound("openai", part.file.file_id, `${at}.file.file_id`) : stored.part
      }
      const data = part.file.file_data
      if (data === undefined) return Errors.invalidRequest("invalid_request_error", `${at}.file: needs file_id or file_data`, { param: `${at}.file` })
      const mediaType = dataUrlType(data) ?? "application/pdf"
      const url = data.startsWith("data:") ? data : `data:${mediaType};base64,${data}`
      return { type: "file", mediaType, data: url, ...(part.file.filename !== undefined ? { filename: part.file.filename } : {}) }
    }
    case "input_audio":
      return Errors.invalidRequest("unsupported_parameter", `${at}: input_audio parts are not supported`, { param: `${at}.type` })
  }
}

const toMessages = (wire: ReadonlyArray<ChatMessage>, files: ResolvedFiles): { system: Array<TextPart>; messages: Array<Message> } | GatewayError => {
  const system: Array<TextPart> = []
  const messages: Array<Message> = []
  const knownCalls = new Map<string, string>()
  for (let i = 0; i < wire.length; i++) {
    const m = wire[i]
    const at = `messages.${i}`
    switch (m.role) {
      case "system":
      case "developer":
        system.push({ type: "text", text: textOf(m.content) })
        break
      case "user": {
        const parts: Array<UserPart> = []
        if (typeof m.content === "string") parts.push({ type: "text", text: m.content })
        else {
          for (let j = 0; j < m.content.length; j++) {
            const part = userPart(m.content[j], `${at}.content.${j}`, files)
            if (part instanceof GatewayError) return part
            parts.push(part)
          }
        }
        messages.push({ role: "user", parts })
        break
      }
      case "assistant": {
        const parts: Array<AssistantPart> = []
        if (m.reasoning_content) parts.push({ type: "reasoning", text: m.reasoning_content })
        const text = m.content == null ? "" : typeof m.content === "string" ? m.content : m.content.map((p) => ("text" in p ? p.text : "")).join("")
        if (text !== "") parts.push({ type: "text", text })
        for (const call of m.tool_calls ?? []) {
          knownCalls.set(call.id, call.function.name)
          parts.push({ type: "tool_call", id: call.id, name: call.function.name, arguments: call.function.arguments })
        }
        messages.push({ role: "assistant", parts })
        break
      }
      case "tool": {
        const name = knownCalls.get(m.tool_call_id)
        if (name === undefined) {
          return Errors.invalidRequest("invalid_request_error", `${at}.tool_call_id: no earlier assistant tool call has id ${m.tool_call_id}`, {
            param: `${at}.tool_call_id`
          })
        }
        const result: ToolResultPart = { type: "tool_result", callId: m.tool_call_id, name, content: [{ type: "text", text: textOf(m.content) }] }
        const last = messages[messages.length - 1]
        if (last !== undefined && last.role === "tool") messages[messages.length - 1] = { role: "tool", parts: [...last.parts, result] }
        else messages.push({ role: "tool", parts: [result] })
        break
      }
    }
  }
  return { system, messages }
}

const toTools = (request: ChatRequest): Array<ToolDefinition> | GatewayError => {
  const tools: Array<ToolDefinition> = []
  const seen = new Set<string>()
  for (const [i, tool] of (request.tools ?? []).entries()) {
    if (tool.type !== "function" || tool.function === undefined) {
      return Errors.invalidRequest("unsupported_parameter", `tools.${i}.type: only function tools are supported`, { param: `tools.${i}.type` })
    }
    const fn = tool.function
    if (seen.has(fn.name)) return Errors.invalidRequest("invalid_request_error", `Duplicate tool name: ${fn.name}`, { param: `tools.${i}.function.name` })
    seen.add(fn.name)
    tools.push({
      name: fn.name,
      ...(fn.description !== undefined ? { description: fn.description } : {}),
      parameters: fn.parameters ?? { type: "object", properties: {} }
    })
  }
  return tools
}

const toToolChoice = (choice: ChatRequest["tool_choice"], tools: ReadonlyArray<ToolDefinition>, hostTool: HostToolName | undefined): ToolChoice | GatewayError => {
  if (choice == null) return { type: "auto" }
  if (typeof choice === "string") return { type: choice }
  if (!tools.some((t) => t.name === choice.function.name) && hostTool?.(choice.function.name) !== true) {
    return Errors.invalidRequest("invalid_request_error", `tool_choice.function.name: no tool named ${choice.function.name}`, { param: "tool_choice.function.name" })
  }
  return { type: "tool", name: choice.function.name }
}

export interface DecodedChat {
  readonly request: CanonicalRequest
  readonly n: number
  readonly includeUsage: boolean
}

/** A name the app's host tools may hold: a `tool_choice` may name it undeclared (HostTools checks it is offered). */
export type HostToolName = (name: string) => boolean

/** Decode a chat-completions request; `maxChoices` bounds `n`; `maxTools` bounds the tools. */
export const decodeChat = (
  wire: ChatRequest,
  limits: { readonly maxChoices: number; readonly maxTools: number; readonly hostTool?: HostToolName },
  files: ResolvedFiles = new Map()
): Either.Either<DecodedChat, GatewayError> => {
  const decoded = decodeChatRequest(wire, limits, files)
  return decoded instanceof GatewayError ? Either.left(decoded) : Either.right(decoded)
}

const decodeChatRequest = (
  wire: ChatRequest,
  limits: { readonly maxChoices: number; readonly maxTools: number; readonly hostTool?: HostToolName },
  files: ResolvedFiles
): DecodedChat | GatewayError => {
  const n = wire.n ?? 1
  if (n > limits.maxChoices) {
    return Errors.invalidRequest("invalid_request_error", `n: at most ${limits.maxChoices} choices are allowed`, { param: "n" })
  }
  const conversation = toMessages(wire.messages, files)
  if (conversation instanceof GatewayError) return conversation
  const { messages, system } = conversation
  const tools = toTools(wire)
  if (tools instanceof GatewayError) return tools
  if (tools.length > limits.maxTools) {
    return Errors.invalidRequest("too_many_tools", `tools: at most ${limits.maxTools} tools are allowed`, { param: "tools" })
  }
  const toolChoice = toToolChoice(wire.tool_choice, tools, limits.hostTool)
  if (toolChoice instanceof GatewayError) return toolChoice
  const format = wire.response_format
  let structured: CanonicalRequest["structured"]
  if (format?.type === "json_schema") {
    if (tools.some((t) => t.name === respondToolName)) {
      return Errors.invalidRequest("reserved_tool_name", `tools: the name ${respondToolName} is reserved when response_format is json_schema`, { param: "tools" })
    }
    if (toolChoice.type === "tool") {
      return Errors.invalidRequest("unsupported_parameter", "tool_choice: a named tool cannot be combined with response_format json_schema", { param: "tool_choice" })
    }
    structured = { name: format.json_schema.name, schema: format.json_schema.schema ?? { type: "object" }, jsonObject: false }
  } else if (format?.type === "json_object") {
    structured = { name: "json_object", schema: { type: "object" }, jsonObject: true }
  }
  const stop = wire.stop == null ? undefined : typeof wire.stop === "string" ? [wire.stop] : wire.stop
  const maxOutputTokens = wire.max_completion_tokens ?? wire.max_tokens ?? undefined
  const request: CanonicalRequest = {
    system,
    messages,
    tools,
    toolChoice,
    sampling: samplingOf(wire, stop),
    ...(maxOutputTokens !== undefined ? { maxOutputTokens } : {}),
    ...(wire.reasoning_effort != null ? { reasoningEffort: wire.reasoning_effort } : {}),
    ...(structured !== undefined ? { structured } : {}),
    parallelToolCalls: wire.parallel_tool_calls !== false,
    stream: wire.stream === true,
    ...(wire.user !== undefined ? { user: wire.user } : {}),
    ...(wire.prompt_cache_key != null ? { conversation: wire.prompt_cache_key } : {})
  }
  return { request, n, includeUsage: wire.stream_options?.include_usage === true }
}

const samplingOf = (wire: ChatRequest | CompletionRequest, stop: ReadonlyArray<string> | undefined): CanonicalRequest["sampling"] => ({
  ...(wire.temperature != null ? { temperature: wire.temperature } : {}),
  ...(wire.top_p != null ? { topP: wire.top_p } : {}),
  ...(wire.top_k != null ? { topK: wire.top_k } : {}),
  ...(wire.seed != null ? { seed: wire.seed } : {}),
  ...(wire.presence_penalty != null ? { presencePenalty: wire.presence_penalty } : {}),
  ...(wire.frequency_penalty != null ? { frequencyPenalty: wire.frequency_penalty } : {}),
  ...(stop !== undefined ? { stop } : {})
})

/** Legacy completions: the prompt becomes one user message. */
export const decodeCompletion = (wire: CompletionRequest, limits: { readonly maxChoices: number }): Either.Either<DecodedChat, GatewayError> => {
  const n = wire.n ?? 1
  if (n > limits.maxChoices) {
    return Either.left(Errors.invalidRequest("invalid_request_error", `n: at most ${limits.maxChoices} choices are allowed`, { param: "n" }))
  }
  if (Array.isArray(wire.prompt) && wire.prompt.length > 1) {
    return Either.left(Errors.invalidRequest("unsupported_parameter", "prompt: one prompt per request is supported", { param: "prompt" }))
  }
  const prompt = typeof wire.prompt === "string" ? wire.prompt : wire.prompt[0]
  const stop = wire.stop == null ? undefined : typeof wire.stop === "string" ? [wire.stop] : wire.stop
  return Either.right({
    request: {
      system: [],
      messages: [{ role: "user", parts: [{ type: "text", text: prompt }] }],
      tools: [],
      toolChoice: { type: "auto" },
      sampling: samplingOf(wire, stop),
      ...(wire.max_tokens != null ? { maxOutputTokens: wire.max_tokens } : {}),
      parallelToolCalls: true,
      stream: wire.stream === true,
      ...(wire.user !== undefined ? { user: wire.user } : {})
    },
    n,
    includeUsage: wire.stream_options?.include_usage === true
  })
}
