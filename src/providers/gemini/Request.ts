import type {
  AssistantPart,
  CanonicalRequest,
  FilePart,
  ImagePart,
  Message,
  ToolChoice,
  ToolResultPart,
  UserPart
} from "../../domain/Canonical.js"
import type { ProviderTarget } from "../Provider.js"
import { parseDataUrl } from "../DataUrl.js"
import { parseJsonText } from "../../domain/JsonDepth.js"

/** generateContent wire request built from a canonical request (the `gemini` provider type). */

type Part = Record<string, unknown>

interface WireContent {
  readonly role: "user" | "model"
  parts: Array<Part>
}

/**
 * The signature Google documents for function calls the model did not produce itself (history from
 * another provider, or a client whose protocol cannot carry signatures). Gemini 3 refuses a model
 * turn whose first functionCall has no signature at all.
 */
export const foreignCallSignature = "skip_thought_signature_validator"

/**
 * thinkingConfig for a reasoning effort: `none` asks for no thinking (budget 0, honoured by models
 * that can think less), any other effort is sent as the thinkingLevel of that name (LOW, HIGH, ...)
 * with thought summaries, so that reasoning comes back. Undefined leaves the model's default.
 */
export const thinkingConfig = (effort: string | undefined): Record<string, unknown> | undefined => {
  if (effort === undefined || effort === "") return undefined
  if (effort === "none") return { thinkingBudget: 0 }
  return { thinkingLevel: effort.toUpperCase(), includeThoughts: true }
}

const imageTypes: Record<string, string> = {
  png: "image/png",
  jpg: "image/jpeg",
  jpeg: "image/jpeg",
  gif: "image/gif",
  webp: "image/webp",
  heic: "image/heic",
  heif: "image/heif"
}

/** An image's type from its URL's extension, for fileData (which wants one). */
const imageTypeOfUrl = (url: string): string | undefined => {
  const match = /\.([a-z0-9]+)(?:[?#]|$)/i.exec(url)
  return match === null ? undefined : imageTypes[match[1].toLowerCase()]
}

const imagePart = (part: ImagePart): Part => {
  const data = parseDataUrl(part.url)
  if (data !== undefined) return { inlineData: { mimeType: part.mediaType ?? data.mediaType, data: data.data } }
  const mimeType = part.mediaType ?? imageTypeOfUrl(part.url)
  return { fileData: mimeType === undefined ? { fileUri: part.url } : { mimeType, fileUri: part.url } }
}

const filePart = (part: FilePart): Part => {
  const data = parseDataUrl(part.data)
  return data === undefined
    ? { fileData: { mimeType: part.mediaType, fileUri: part.data } }
    : { inlineData: { mimeType: part.mediaType || data.mediaType, data: data.data } }
}

const userPart = (part: UserPart): Array<Part> => {
  switch (part.type) {
    case "text":
      return part.text === "" ? [] : [{ text: part.text }]
    case "image":
      return [imagePart(part)]
    case "file":
      return [filePart(part)]
  }
}

/** Tool call arguments as the object functionCall.args wants (`{}` when they are not a JSON object). */
const parseArgs = (args: string): Record<string, unknown> => {
  try {
    const value: unknown = parseJsonText(args)
    return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : {}
  } catch {
    return {}
  }
}

/**
 * An assistant turn as model parts. Reasoning text is not sent back (Gemini reads nothing from
 * thought summaries). A signature this family made goes on the part that follows it: the provider
 * emits a part's signature just before the part's own event, and the Gemini-style protocol decodes
 * a client's `thoughtSignature` the same way, so it lands on the part it came with; a trailing one
 * goes on the last part, and a turn with no other part drops it. Other families' signatures and
 * redacted reasoning are never sent (spec 4.2).
 */
const modelParts = (parts: ReadonlyArray<AssistantPart>): Array<Part> => {
  const out: Array<Part> = []
  let pending: string | undefined
  const push = (wire: Part) => {
    if (pending !== undefined) wire.thoughtSignature = pending
    pending = undefined
    out.push(wire)
  }
  for (const part of parts) {
    switch (part.type) {
      case "reasoning":
        if (part.family === "gemini" && part.signature !== undefined && part.signature !== "" && part.redacted === undefined) pending = part.signature
        break
      case "text":
        if (part.text !== "") push({ text: part.text })
        break
      case "tool_call":
        push({ functionCall: { id: part.id, name: part.name, args: parseArgs(part.arguments) } })
        break
    }
  }
  const last = out[out.length - 1]
  if (pending !== undefined && last !== undefined && last.thoughtSignature === undefined) last.thoughtSignature = pending
  return out
}

/** The tool name of a result: its own, else the name of the latest earlier call with its id. */
const resultName = (part: ToolResultPart, names: ReadonlyMap<string, string>): string => part.name ?? names.get(part.callId) ?? part.callId

const textOfResult = (part: ToolResultPart): string => part.content.map((c) => (c.type === "text" ? c.text : "")).join("")

/**
 * A result's `response` object. A result that is a JSON object (what the Gemini-style API passes
 * on: the caller's own `response`) goes back as that object, so a Gemini client's results reach a
 * Gemini upstream as sent; other text is `{output}`, or `{error}` for a failed call.
 */
const responseOf = (part: ToolResultPart): Record<string, unknown> => {
  const text = textOfResult(part)
  if (text.startsWith("{")) {
    try {
      const value = parseJsonText(text) as unknown
      if (typeof value === "object" && value !== null && !Array.isArray(value)) {
        const record = value as Record<string, unknown>
        // an error result keeps its error marker (an object without `output` but with `error`)
        if (part.isError !== true || ("error" in record && !("output" in record))) return record
      }
    } catch {
      // not JSON: sent as text below
    }
  }
  return part.isError === true ? { error: text } : { output: text }
}

/**
 * Tool results as functionResponse parts (`{output}`, or `{error}` for a failed call); images in
 * results follow as inline parts of the same user turn.
 */
const resultParts = (parts: ReadonlyArray<ToolResultPart>, names: ReadonlyMap<string, string>): Array<Part> => {
  const responses = parts.map((p): Part => ({
    functionResponse: {
      id: p.callId,
      name: resultName(p, names),
      response: responseOf(p)
    }
  }))
  const images = parts.flatMap((p) => p.content.flatMap((c) => (c.type === "image" ? [imagePart(c)] : [])))
  return [...responses, ...images]
}

/**
 * Canonical messages as contents: assistant turns are `model`, tool results are `user` turns,
 * empty turns are dropped and consecutive same-role turns merged. In a merged user turn the
 * functionResponse parts come first, right after the calls they answer. The first functionCall of
 * a model turn with no signature gets the foreign-call signature.
 */
export const wireContents = (messages: ReadonlyArray<Message>): Array<WireContent> => {
  const out: Array<WireContent> = []
  const names = new Map<string, string>()
  for (const message of messages) {
    let turn: WireContent
    switch (message.role) {
      case "user":
        turn = { role: "user", parts: message.parts.flatMap(userPart) }
        break
      case "assistant":
        for (const p of message.parts) if (p.type === "tool_call") names.set(p.id, p.name)
        turn = { role: "model", parts: modelParts(message.parts) }
        break
      case "tool":
        turn = { role: "user", parts: resultParts(message.parts, names) }
        break
    }
    if (turn.parts.length === 0) continue
    const last = out[out.length - 1]
    if (last !== undefined && last.role === turn.role) last.parts.push(...turn.parts)
    else out.push({ role: turn.role, parts: [...turn.parts] })
  }
  for (const turn of out) {
    if (turn.role === "user") {
      const responses = turn.parts.filter((p) => p.functionResponse !== undefined)
      if (responses.length > 0) turn.parts = [...responses, ...turn.parts.filter((p) => p.functionResponse === undefined)]
      continue
    }
    const firstCall = turn.parts.find((p) => p.functionCall !== undefined)
    if (firstCall !== undefined && firstCall.thoughtSignature === undefined) firstCall.thoughtSignature = foreignCallSignature
  }
  return out
}

/** Tool choice as functionCallingConfig; Gemini has no switch for parallel calls, so that hint is not sent. */
const functionCallingConfig = (choice: ToolChoice): Record<string, unknown> => {
  switch (choice.type) {
    case "auto":
      return { mode: "AUTO" }
    case "none":
      return { mode: "NONE" }
    case "required":
      return { mode: "ANY" }
    case "tool":
      return { mode: "ANY", allowedFunctionNames: [choice.name] }
  }
}

const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v)

/**
 * A variant's params merged into the body. Objects merge key by key (nearly everything lives under
 * generationConfig, which a shallow merge would replace whole); any other value replaces.
 */
export const mergeParams = (into: Record<string, unknown>, params: { readonly [key: string]: unknown }): Record<string, unknown> => {
  for (const [key, value] of Object.entries(params)) {
    const current = into[key]
    into[key] = isPlainObject(current) && isPlainObject(value) ? mergeParams({ ...current }, value) : value
  }
  return into
}

export const buildGenerateRequest = (target: ProviderTarget, request: CanonicalRequest): Record<string, unknown> => {
  const body: Record<string, unknown> = { contents: wireContents(request.messages) }
  const system = request.system.filter((p) => p.text !== "").map((p) => ({ text: p.text }))
  if (system.length > 0) body.systemInstruction = { parts: system }
  if (request.tools.length > 0) {
    body.tools = [
      {
        functionDeclarations: request.tools.map((t) => ({
          name: t.name,
          ...(t.description !== undefined ? { description: t.description } : {}),
          parametersJsonSchema: t.parameters
        }))
      }
    ]
    body.toolConfig = { functionCallingConfig: functionCallingConfig(request.toolChoice) }
  }
  const generation: Record<string, unknown> = {}
  const s = request.sampling
  if (s.temperature !== undefined) generation.temperature = s.temperature
  if (s.topP !== undefined) generation.topP = s.topP
  if (s.topK !== undefined) generation.topK = s.topK
  if (s.seed !== undefined) generation.seed = s.seed
  if (s.presencePenalty !== undefined) generation.presencePenalty = s.presencePenalty
  if (s.frequencyPenalty !== undefined) generation.frequencyPenalty = s.frequencyPenalty
  if (s.stop !== undefined && s.stop.length > 0) generation.stopSequences = s.stop
  if (request.maxOutputTokens !== undefined) generation.maxOutputTokens = request.maxOutputTokens
  const thinking = thinkingConfig(target.reasoningEffort)
  if (thinking !== undefined) generation.thinkingConfig = thinking
  if (Object.keys(generation).length > 0) body.generationConfig = generation
  return target.params === undefined ? body : mergeParams(body, target.params)
}
