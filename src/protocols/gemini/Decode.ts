import { Either } from "effect"
import type { AssistantPart, CanonicalRequest, Message, Sampling, StructuredOutput, TextPart, ToolChoice, ToolDefinition, ToolResultPart, UserPart } from "../../domain/Canonical.js"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import { respondToolName } from "../../domain/Structured.js"
import { decodeAt } from "../Decode.js"
import type { FileRef, ResolvedFiles } from "../FileParts.js"
import type { RemotePart } from "../RemoteParts.js"
import { pairCalls } from "./Pairing.js"
import { Content, FileData, FunctionCall, FunctionDeclaration, FunctionResponse, InlineData, refusedPartKinds, refusedToolKinds, type GenerateContentRequest } from "./Schema.js"
import { geminiSchemaToJsonSchema, lowerCaseTypes } from "./ToJsonSchema.js"

/** Translation of a decoded generate-content request into the canonical request (spec 4.3). */

type Result<A> = Either.Either<A, GatewayError>
type Part = Readonly<Record<string, unknown>>

/** A 400 INVALID_ARGUMENT naming the field in the message and in `details.fieldViolations`. */
export const refuse = (field: string, why: string): GatewayError => Errors.invalidRequest("invalid_argument", `${field}: ${why}`, { param: field })

/** `File <name> was not found` (spec 4.4), for a `fileData` naming a file the app has not uploaded. */
const fileNotFound = (name: string, field: string): GatewayError => Errors.notFound("not_found", `File ${name} was not found`, { param: field })

const decoders = {
  content: decodeAt(Content),
  inlineData: decodeAt(InlineData),
  fileData: decodeAt(FileData),
  functionCall: decodeAt(FunctionCall),
  functionResponse: decodeAt(FunctionResponse),
  declaration: decodeAt(FunctionDeclaration)
}

/** Standard or URL-safe base64, normalised to standard with padding; undefined when it is not base64. */
export const normalizeBase64 = (data: string): string | undefined => {
  const compact = data.replace(/\s+/g, "").replace(/-/g, "+").replace(/_/g, "/").replace(/=+$/, "")
  if (!/^[A-Za-z0-9+/]*$/.test(compact) || compact.length % 4 === 1) return undefined
  return compact + "=".repeat((4 - (compact.length % 4)) % 4)
}

const isHttpUrl = (uri: string) => /^https?:\/\//i.test(uri)

/** The stored file a `fileUri` names: `files/<hex>`, or the `uri` of an upload to this gateway. */
export const storedFileId = (uri: string, origin: string): string | undefined => {
  const name = /^files\/([0-9a-f]{32})$/.exec(uri)
  if (name !== null) return `file-${name[1]}`
  const upload = /^(https?:\/\/[^/]+)\/v1beta\/files\/([0-9a-f]{32})$/.exec(uri)
  return upload !== null && upload[1].toLowerCase() === origin.toLowerCase() ? `file-${upload[2]}` : undefined
}

/** Every `fileData.fileUri` in the contents: stored files to resolve, http(s) URLs to fetch, before `decodeGemini`. */
export const fileUris = (contents: ReadonlyArray<unknown>, origin: string): { readonly stored: Array<FileRef>; readonly remote: Array<string> } => {
  const stored: Array<FileRef> = []
  const remote = new Set<string>()
  contents.forEach((content, i) => {
    const parts = (content as { parts?: unknown })?.parts
    if (!Array.isArray(parts)) return
    parts.forEach((part, j) => {
      const uri = (part as { fileData?: { fileUri?: unknown } } | null)?.fileData?.fileUri
      if (typeof uri !== "string") return
      const id = storedFileId(uri, origin)
      if (id !== undefined) stored.push({ id, param: `contents.${i}.parts.${j}.fileData.fileUri` })
      else if (isHttpUrl(uri)) remote.add(uri)
    })
  })
  return { stored, remote: [...remote] }
}

/** The media part of `inlineData`: images and PDFs as data URLs, text decoded. */
const inlinePart = (part: Part, at: string): Result<UserPart> => {
  const inline = decoders.inlineData(part.inlineData, `${at}.inlineData`)
  if (Either.isLeft(inline)) return Either.left(inline.left)
  const data = normalizeBase64(inline.right.data)
  if (data === undefined) return Either.left(refuse(`${at}.inlineData.data`, "is not base64"))
  const mimeType = inline.right.mimeType.toLowerCase().split(";")[0].trim()
  if (mimeType.startsWith("image/")) return Either.right({ type: "image", url: `data:${mimeType};base64,${data}`, mediaType: mimeType })
  if (mimeType === "application/pdf") return Either.right({ type: "file", mediaType: mimeType, data: `data:${mimeType};base64,${data}` })
  if (mimeType.startsWith("text/") || mimeType === "application/json") {
    const text = Buffer.from(data, "base64").toString("utf8")
    if (text.includes("\uFFFD") || text.includes("\u0000")) return Either.left(refuse(`${at}.inlineData.data`, "is not UTF-8 text"))
    return Either.right({ type: "text", text })
  }
  return Either.left(refuse(`${at}.inlineData.mimeType`, `${mimeType} is not supported; send images, PDF or text`))
}

const filePart = (part: Part, at: string, options: DecodeOptions): Result<UserPart> => {
  const file = decoders.fileData(part.fileData, `${at}.fileData`)
  if (Either.isLeft(file)) return Either.left(file.left)
  const uri = file.right.fileUri
  const remote = options.remote
  // a stored file: its stored type is used, a mimeType given here is not
  const id = storedFileId(uri, options.origin)
  if (id !== undefined) {
    const stored = options.files.get(id)
    return stored === undefined ? Either.left(fileNotFound(`files/${id.slice("file-".length)}`, `${at}.fileData.fileUri`)) : Either.right(stored.part)
  }
  if (/^gs:\/\//i.test(uri)) return Either.left(refuse(`${at}.fileData.fileUri`, "gs:// URIs are not supported; upload the file or send it inline"))
  if (isHttpUrl(uri)) {
    const fetched = remote.get(uri)
    if (fetched === undefined) return Either.left(refuse(`${at}.fileData.fileUri`, "the file could not be fetched"))
    if (fetched._tag === "failed") return Either.left(refuse(`${at}.fileData.fileUri`, fetched.why))
    return Either.right(fetched.part)
  }
  // any other name (`files/...` of another shape, another gateway's uri): no such file here
  return Either.left(fileNotFound(uri, `${at}.fileData.fileUri`))
}

const callArguments = (args: unknown): string => JSON.stringify(args ?? {})

/** `functionResponse.response` as the tool result: JSON text; `{error}` without `output` marks an error. */
const resultOf = (response: Readonly<Record<string, unknown>> | null | undefined, callId: string, name: string): ToolResultPart => {
  const value = response ?? {}
  const isError = "error" in value && !("output" in value)
  return { type: "tool_result", callId, name, content: [{ type: "text", text: JSON.stringify(value) }], ...(isError ? { isError: true } : {}) }
}

/** A part that carries nothing the model reads: thought text, or only a signature. */
const isDropped = (part: Part): boolean => {
  if (part.thought === true) return true
  for (const key of Object.keys(part)) if (key !== "thoughtSignature" && key !== "thought" && part[key] !== undefined && part[key] !== null) return false
  return true
}

export interface DecodedGemini {
  readonly request: CanonicalRequest
  readonly stopSequences: ReadonlyArray<string>
  readonly candidateCount: number
  /** the variant level asked for by `thinkingConfig`, and whether a missing level takes the nearest above */
  readonly reasoning?: { readonly level: string; readonly nearestAbove: boolean }
}

export interface DecodeOptions {
  readonly maxChoices: number
  readonly stream: boolean
  /** fetched http(s) `fileData` parts, by URI */
  readonly remote: ReadonlyMap<string, RemotePart>
  /** stored files named by `fileData`, by file id */
  readonly files: ResolvedFiles
  /** the origin callers reach the gateway at: an upload's `uri` starts with it */
  readonly origin: string
  /** a name the app's host tools may hold: mode ANY may name it alone, undeclared (HostTools checks it is offered) */
  readonly hostTool?: (name: string) => boolean
}

const systemOf = (wire: GenerateContentRequest): Result<Array<TextPart>> => {
  const system = wire.systemInstruction
  if (system === undefined || system === null) return Either.right([])
  if (typeof system === "string") return Either.right(system === "" ? [] : [{ type: "text", text: system }])
  const parts: Array<TextPart> = []
  for (const [j, part] of system.parts.entries()) {
    if (isDropped(part)) continue
    if (typeof part.text !== "string") return Either.left(refuse(`systemInstruction.parts.${j}`, "a system instruction takes text parts only"))
    parts.push({ type: "text", text: part.text })
  }
  return Either.right(parts)
}

const toolsOf = (wire: GenerateContentRequest): Result<Array<ToolDefinition>> => {
  const tools: Array<ToolDefinition> = []
  for (const [i, tool] of (wire.tools ?? []).entries()) {
    for (const kind of refusedToolKinds) {
      if (tool[kind] !== undefined && tool[kind] !== null) return Either.left(refuse(`tools.${i}.${kind}`, `${kind} tools are not supported; only functionDeclarations`))
    }
    const declarations = tool.functionDeclarations
    if (declarations === undefined || declarations === null) continue
    if (!Array.isArray(declarations)) return Either.left(refuse(`tools.${i}.functionDeclarations`, "must be an array"))
    for (const [k, raw] of (declarations as ReadonlyArray<unknown>).entries()) {
      const at = `tools.${i}.functionDeclarations.${k}`
      const declared = decoders.declaration(raw, at)
      if (Either.isLeft(declared)) return Either.left(declared.left)
      const d = declared.right
      if (tools.some((t) => t.name === d.name)) return Either.left(refuse(`${at}.name`, `duplicate function name ${d.name}`))
      const given = d.parametersJsonSchema
      if (given !== undefined && given !== null && (typeof given !== "object" || Array.isArray(given))) return Either.left(refuse(`${at}.parametersJsonSchema`, "must be a JSON Schema object"))
      const parameters = given !== undefined && given !== null ? (lowerCaseTypes(given) as Record<string, unknown>) : geminiSchemaToJsonSchema(d.parameters)
      tools.push({ name: d.name, ...(d.description ? { description: d.description } : {}), parameters })
    }
  }
  return Either.right(tools)
}

const toolChoiceOf = (
  wire: GenerateContentRequest,
  declared: Array<ToolDefinition>,
  structured: boolean,
  hostTool: ((name: string) => boolean) | undefined
): Result<{ readonly tools: Array<ToolDefinition>; readonly choice: ToolChoice }> => {
  const config = wire.toolConfig?.functionCallingConfig
  const mode = config?.mode ?? "AUTO"
  let tools = declared
  const allowed = config?.allowedFunctionNames
  // mode ANY naming one host tool of the app, undeclared: that call is forced (the caller's tools are not allowed)
  if (mode === "ANY" && allowed?.length === 1 && !declared.some((t) => t.name === allowed[0]) && hostTool?.(allowed[0]) === true) {
    if (structured) return Either.left(refuse("toolConfig.functionCallingConfig", "mode ANY with one allowed function cannot be combined with responseSchema"))
    return Either.right({ tools: [], choice: { type: "tool", name: allowed[0] } })
  }
  if (allowed !== undefined && allowed !== null && allowed.length > 0) {
    for (const [k, name] of allowed.entries()) {
      if (!declared.some((t) => t.name === name)) return Either.left(refuse(`toolConfig.functionCallingConfig.allowedFunctionNames.${k}`, `no function named ${name} is declared`))
    }
    tools = declared.filter((t) => allowed.includes(t.name))
  }
  if (mode === "NONE") return Either.right({ tools, choice: { type: "none" } })
  if (mode === "ANY") {
    if (tools.length === 0) return Either.right({ tools, choice: { type: "auto" } })
    if (allowed !== undefined && allowed !== null && allowed.length === 1) {
      if (structured) return Either.left(refuse("toolConfig.functionCallingConfig", "mode ANY with one allowed function cannot be combined with responseSchema"))
      return Either.right({ tools, choice: { type: "tool", name: allowed[0] } })
    }
    return Either.right({ tools, choice: { type: "required" } })
  }
  // AUTO, VALIDATED (read as AUTO) and MODE_UNSPECIFIED
  return Either.right({ tools, choice: { type: "auto" } })
}

const structuredOf = (wire: GenerateContentRequest, tools: ReadonlyArray<ToolDefinition>): Result<StructuredOutput | undefined> => {
  const config = wire.generationConfig
  const mime = config?.responseMimeType?.toLowerCase().trim()
  if (mime !== undefined && mime !== "" && mime !== "application/json" && mime !== "text/plain") {
    return Either.left(refuse("generationConfig.responseMimeType", "must be application/json or text/plain"))
  }
  const jsonSchema = config?.responseJsonSchema
  const schema = config?.responseSchema
  let structured: StructuredOutput | undefined
  if (jsonSchema !== undefined && jsonSchema !== null) {
    if (typeof jsonSchema !== "object" || Array.isArray(jsonSchema)) return Either.left(refuse("generationConfig.responseJsonSchema", "must be a JSON Schema object"))
    structured = { name: "response", schema: lowerCaseTypes(jsonSchema) as Record<string, unknown>, jsonObject: false }
  } else if (schema !== undefined && schema !== null) {
    if (typeof schema !== "object" || Array.isArray(schema)) return Either.left(refuse("generationConfig.responseSchema", "must be a schema object"))
    structured = { name: "response", schema: geminiSchemaToJsonSchema(schema), jsonObject: false }
  } else if (mime === "application/json") {
    structured = { name: "json_object", schema: { type: "object" }, jsonObject: true }
  }
  if (structured !== undefined && tools.some((t) => t.name === respondToolName)) {
    return Either.left(refuse("tools", `the function name ${respondToolName} is reserved when a response schema is given`))
  }
  return Either.right(structured)
}

/** thinkingConfig: a level by name (nearest above, or highest), or a budget mapped to a level (spec 4.3). */
const reasoningOf = (wire: GenerateContentRequest): DecodedGemini["reasoning"] => {
  const thinking = wire.generationConfig?.thinkingConfig
  if (thinking === undefined || thinking === null) return undefined
  const level = thinking.thinkingLevel
  if (typeof level === "string" && level !== "" && level !== "THINKING_LEVEL_UNSPECIFIED") return { level: level.toLowerCase(), nearestAbove: true }
  const budget = thinking.thinkingBudget
  if (budget === undefined || budget === null || budget === -1) return undefined
  if (budget === 0) return { level: "none", nearestAbove: false }
  return { level: budget <= 1024 ? "low" : budget <= 8192 ? "medium" : "high", nearestAbove: true }
}

const samplingOf = (wire: GenerateContentRequest): Sampling => {
  const c = wire.generationConfig
  if (c === undefined || c === null) return {}
  const sampling: { -readonly [K in keyof Sampling]: Sampling[K] } = {}
  if (typeof c.temperature === "number") sampling.temperature = c.temperature
  if (typeof c.topP === "number") sampling.topP = c.topP
  if (typeof c.topK === "number") sampling.topK = c.topK
  if (typeof c.seed === "number") sampling.seed = c.seed
  if (typeof c.presencePenalty === "number") sampling.presencePenalty = c.presencePenalty
  if (typeof c.frequencyPenalty === "number") sampling.frequencyPenalty = c.frequencyPenalty
  return sampling
}

/** The refusals of spec 7.4 that concern the request as a whole. */
const requestRefusal = (wire: GenerateContentRequest, maxChoices: number): GatewayError | undefined => {
  if (wire.cachedContent !== undefined && wire.cachedContent !== null) return refuse("cachedContent", "cached contents are not supported; send the whole conversation")
  const c = wire.generationConfig
  if (c === undefined || c === null) return undefined
  const count = c.candidateCount ?? 1
  if (count < 1) return refuse("generationConfig.candidateCount", "must be at least 1")
  if (count > maxChoices) return refuse("generationConfig.candidateCount", `at most ${maxChoices} candidates are allowed`)
  if (c.responseLogprobs === true) return refuse("generationConfig.responseLogprobs", "log probabilities are not supported")
  const modalities = c.responseModalities ?? []
  for (const [k, modality] of modalities.entries()) {
    if (modality.toUpperCase() !== "TEXT") return refuse(`generationConfig.responseModalities.${k}`, "only TEXT is supported")
  }
  if ((c.stopSequences ?? []).length > 5) return refuse("generationConfig.stopSequences", "at most 5 stop sequences are allowed")
  return undefined
}

/** The parts of one content entry, as user-side or model-side canonical messages. */
const contentMessages = (
  { content, functions }: ReadContent,
  i: number,
  pairing: { readonly calls: ReadonlyMap<string, string>; readonly responses: ReadonlyMap<string, string> },
  options: DecodeOptions
): Result<Array<Message>> => {
  const role = content.role === undefined || content.role === null || content.role === "" ? "user" : content.role
  if (role !== "user" && role !== "model" && role !== "function") return Either.left(refuse(`contents.${i}.role`, "must be user or model"))
  const model = role === "model"
  const messages: Array<Message> = []
  const assistant: Array<AssistantPart> = []
  let user: Array<UserPart> = []
  let results: Array<ToolResultPart> = []
  // keep the order of a user turn's pieces: tool results and other parts become separate messages
  const flushUser = () => {
    if (user.length > 0) messages.push({ role: "user", parts: user })
    user = []
  }
  const flushResults = () => {
    if (results.length > 0) messages.push({ role: "tool", parts: results })
    results = []
  }
  for (const [j, part] of content.parts.entries()) {
    const at = `contents.${i}.parts.${j}`
    for (const kind of refusedPartKinds) if (part[kind] !== undefined && part[kind] !== null) return Either.left(refuse(`${at}.${kind}`, `${kind} parts are not supported`))
    if (isDropped(part)) continue
    // a model part's signature rides just before it, as the gemini provider emits it, to go back on the same part
    if (model && typeof part.thoughtSignature === "string" && part.thoughtSignature !== "") assistant.push({ type: "reasoning", text: "", signature: part.thoughtSignature, family: "gemini" })
    if (typeof part.text === "string") {
      if (model) assistant.push({ type: "text", text: part.text })
      else {
        flushResults()
        user.push({ type: "text", text: part.text })
      }
      continue
    }
    const call = functions.calls.get(j)
    if (call !== undefined) {
      if (!model) return Either.left(refuse(`${at}.functionCall`, "a functionCall belongs in a model turn"))
      assistant.push({ type: "tool_call", id: pairing.calls.get(`${i}.${j}`) ?? "", name: call.name, arguments: callArguments(call.args) })
      continue
    }
    const response = functions.responses.get(j)
    if (response !== undefined) {
      if (model) return Either.left(refuse(`${at}.functionResponse`, "a functionResponse belongs in a user turn"))
      flushUser()
      results.push(resultOf(response.response, pairing.responses.get(`${i}.${j}`) ?? "", response.name))
      continue
    }
    if (part.inlineData !== undefined && part.inlineData !== null) {
      if (model) return Either.left(refuse(`${at}.inlineData`, "inlineData is not supported in a model turn"))
      const media = inlinePart(part, at)
      if (Either.isLeft(media)) return Either.left(media.left)
      flushResults()
      user.push(media.right)
      continue
    }
    if (part.fileData !== undefined && part.fileData !== null) {
      if (model) return Either.left(refuse(`${at}.fileData`, "fileData is not supported in a model turn"))
      const file = filePart(part, at, options)
      if (Either.isLeft(file)) return Either.left(file.left)
      flushResults()
      user.push(file.right)
      continue
    }
    return Either.left(refuse(at, "a part needs text, inlineData, fileData, functionCall or functionResponse"))
  }
  if (model) return Either.right(assistant.length > 0 ? [{ role: "assistant", parts: assistant }] : [])
  flushResults()
  flushUser()
  return Either.right(messages)
}

/** The function parts of one content entry, decoded once: by part index. */
interface FunctionParts {
  readonly calls: ReadonlyMap<number, typeof FunctionCall.Type>
  readonly responses: ReadonlyMap<number, typeof FunctionResponse.Type>
}

/** A `contents` entry in its readable shape, with its function parts decoded. */
interface ReadContent {
  readonly content: Content
  readonly functions: FunctionParts
}

/** The readable shape of each `contents` entry and its decoded function parts, checked before pairing reads the calls. */
const readContents = (contents: ReadonlyArray<unknown>): Result<Array<ReadContent>> => {
  const out: Array<ReadContent> = []
  for (const [i, raw] of contents.entries()) {
    const content = decoders.content(raw, `contents.${i}`)
    if (Either.isLeft(content)) return Either.left(content.left)
    const calls = new Map<number, typeof FunctionCall.Type>()
    const responses = new Map<number, typeof FunctionResponse.Type>()
    for (const [j, part] of content.right.parts.entries()) {
      if (part.functionCall !== undefined && part.functionCall !== null) {
        const call = decoders.functionCall(part.functionCall, `contents.${i}.parts.${j}.functionCall`)
        if (Either.isLeft(call)) return Either.left(call.left)
        calls.set(j, call.right)
      }
      if (part.functionResponse !== undefined && part.functionResponse !== null) {
        const response = decoders.functionResponse(part.functionResponse, `contents.${i}.parts.${j}.functionResponse`)
        if (Either.isLeft(response)) return Either.left(response.left)
        responses.set(j, response.right)
      }
    }
    out.push({ content: content.right, functions: { calls, responses } })
  }
  return Either.right(out)
}

const pairingView = (contents: ReadonlyArray<ReadContent>) =>
  contents.map(({ content, functions }) => ({
    parts: content.parts.map((_, j) => {
      const call = functions.calls.get(j)
      const response = functions.responses.get(j)
      return {
        ...(call ? { functionCall: { name: call.name, ...(call.id ? { id: call.id } : {}) } } : {}),
        ...(response ? { functionResponse: { name: response.name, ...(response.id ? { id: response.id } : {}) } } : {})
      }
    })
  }))

/** Decode a generate-content request into the canonical request, with the refusals of spec 7.4. */
export const decodeGemini = (wire: GenerateContentRequest, options: DecodeOptions): Result<DecodedGemini> => {
  const refused = requestRefusal(wire, options.maxChoices)
  if (refused !== undefined) return Either.left(refused)
  if (wire.contents.length === 0) return Either.left(refuse("contents", "must hold at least one content"))
  const contents = readContents(wire.contents)
  if (Either.isLeft(contents)) return Either.left(contents.left)
  const pairing = pairCalls(pairingView(contents.right))
  if (Either.isLeft(pairing)) return Either.left(refuse(pairing.left.field, pairing.left.message))
  const system = systemOf(wire)
  if (Either.isLeft(system)) return Either.left(system.left)
  const declared = toolsOf(wire)
  if (Either.isLeft(declared)) return Either.left(declared.left)
  const structured = structuredOf(wire, declared.right)
  if (Either.isLeft(structured)) return Either.left(structured.left)
  const toolPlan = toolChoiceOf(wire, declared.right, structured.right !== undefined && !structured.right.jsonObject, options.hostTool)
  if (Either.isLeft(toolPlan)) return Either.left(toolPlan.left)
  const messages: Array<Message> = []
  for (const [i, content] of contents.right.entries()) {
    const converted = contentMessages(content, i, pairing.right, options)
    if (Either.isLeft(converted)) return Either.left(converted.left)
    for (const message of converted.right) {
      const last = messages[messages.length - 1]
      // consecutive model turns are joined into one assistant message
      if (message.role === "assistant" && last?.role === "assistant") messages[messages.length - 1] = { role: "assistant", parts: [...last.parts, ...message.parts] }
      else messages.push(message)
    }
  }
  const config = wire.generationConfig
  const reasoning = reasoningOf(wire)
  const request: CanonicalRequest = {
    system: system.right,
    messages,
    tools: toolPlan.right.tools,
    toolChoice: toolPlan.right.choice,
    sampling: samplingOf(wire),
    ...(typeof config?.maxOutputTokens === "number" ? { maxOutputTokens: config.maxOutputTokens } : {}),
    ...(reasoning !== undefined ? { reasoningEffort: reasoning.level } : {}),
    ...(structured.right !== undefined ? { structured: structured.right } : {}),
    parallelToolCalls: true,
    stream: options.stream
  }
  return Either.right({
    request,
    stopSequences: (config?.stopSequences ?? []).filter((s) => s !== ""),
    candidateCount: config?.candidateCount ?? 1,
    ...(reasoning !== undefined ? { reasoning } : {})
  })
}
