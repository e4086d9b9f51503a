import { Effect, Either, Option } from "effect"
import type { AssistantPart, Message, TextPart, ToolResultPart, UserPart } from "../../domain/Canonical.js"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import { randomHex } from "../../domain/Ids.js"
import { decodeAt } from "../Decode.js"
import { fileNotFound, type FileRef, type ResolvedFiles } from "../FileParts.js"
import type { RemotePart } from "../RemoteParts.js"
import { flattenName } from "./Tools.js"
import { itemSchemas, type ContentPart } from "./Schema.js"

/**
 * Responses-style input items (spec 2.1): decoded one by one by type, given ids, and turned into
 * canonical messages. Items are kept as JSON records: that is how they are stored and listed.
 */

export type Item = Readonly<Record<string, unknown>>

type Result<A> = Either.Either<A, GatewayError>

/**
 * An input item as the translation reads it: the value its Schema decoded. A message may leave
 * its `type` out. Reasoning items are dropped and item references resolved before translation.
 */
export type TypedItem =
  | typeof itemSchemas.message.Type
  | typeof itemSchemas.function_call.Type
  | typeof itemSchemas.function_call_output.Type
  | typeof itemSchemas.custom_tool_call.Type
  | typeof itemSchemas.custom_tool_call_output.Type
  | typeof itemSchemas.additional_tools.Type

/** Input items twice: as stored and listed (the client's record, with an id), and as decoded. */
export interface Input {
  readonly items: ReadonlyArray<Item>
  readonly typed: ReadonlyArray<TypedItem>
}

/** One input item of this request after decoding: an item, or a reference still to resolve. */
export type Entry =
  | { readonly _tag: "item"; readonly item: Item; readonly typed: TypedItem }
  | { readonly _tag: "reference"; readonly id: string; readonly at: string }

const decoders = {
  message: decodeAt(itemSchemas.message),
  function_call: decodeAt(itemSchemas.function_call),
  function_call_output: decodeAt(itemSchemas.function_call_output),
  custom_tool_call: decodeAt(itemSchemas.custom_tool_call),
  custom_tool_call_output: decodeAt(itemSchemas.custom_tool_call_output),
  additional_tools: decodeAt(itemSchemas.additional_tools),
  item_reference: decodeAt(itemSchemas.item_reference),
  reasoning: decodeAt(itemSchemas.reasoning)
} as const

type ItemType = keyof typeof decoders

type MessageItem = typeof itemSchemas.message.Type

const isMessage = (item: TypedItem): item is MessageItem => item.type === undefined || item.type === "message"

/** The type of an input item; a message may leave it out. */
export const itemType = (item: Item): string => (typeof item.type === "string" ? item.type : "role" in item ? "message" : "")

/** Id prefixes of generated input item ids (spec 2.1). */
const idPrefix = (type: string): string =>
  type === "function_call" || type === "custom_tool_call" ? "fc_" : type === "function_call_output" || type === "custom_tool_call_output" ? "fco_" : "msg_"

export const newItemId = (prefix: string) => `${prefix}${randomHex()}`

/**
 * The typed view of items decoded before: history (input items stored after their request decoded
 * them, and output items the gateway wrote) and held `item_reference` targets. The item Schemas
 * have no transformations, so an item's decoded value is its record: it needs no second decode,
 * which for a long chain would cost more than the model call's own preparation.
 */
export const decodedBefore = (items: ReadonlyArray<Item>): ReadonlyArray<TypedItem> => items as unknown as ReadonlyArray<TypedItem>

const heldItem = (item: Item): TypedItem => item as unknown as TypedItem

/**
 * Decode this request's input items one by one by type (string input is one user message): drop
 * reasoning items and give every item an id (the caller's, or a generated one). Item references
 * are left to `resolveReferences`.
 */
export const readInput = (input: string | ReadonlyArray<unknown> | undefined): Result<Array<Entry>> => {
  if (input === undefined) return Either.right([])
  if (typeof input === "string") {
    const content = [{ type: "input_text" as const, text: input }]
    return Either.right([{ _tag: "item", item: { id: newItemId("msg_"), type: "message", role: "user", content }, typed: { role: "user", content } }])
  }
  const entries: Array<Entry> = []
  for (let i = 0; i < input.length; i++) {
    const at = `input.${i}`
    const raw = input[i]
    if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
      return Either.left(Errors.invalidRequest("invalid_request_error", `${at}: an input item is an object`, { param: at }))
    }
    const item = raw as Item
    const type = itemType(item)
    if (!(type in decoders)) {
      return Either.left(Errors.invalidRequest("invalid_request_error", `${at}.type: unknown input item type '${type}'`, { param: `${at}.type` }))
    }
    const decode: (value: unknown, at: string) => Result<TypedItem | typeof itemSchemas.item_reference.Type | typeof itemSchemas.reasoning.Type> =
      decoders[type as ItemType]
    const decoded = decode(item, at)
    if (Either.isLeft(decoded)) return Either.left(decoded.left)
    const typed = decoded.right
    if (typed.type === "reasoning") continue
    if (typed.type === "item_reference") {
      entries.push({ _tag: "reference", id: typed.id, at })
      continue
    }
    const copy: Record<string, unknown> = { ...item, type }
    if (typeof copy.id !== "string" || copy.id === "") copy.id = newItemId(type === "additional_tools" ? "at_" : idPrefix(type))
    entries.push({ _tag: "item", item: copy, typed })
  }
  return Either.right(entries)
}

/** The request's input with each item reference replaced by the held item it names. */
export const resolveReferences = (
  entries: ReadonlyArray<Entry>,
  lookup: (id: string) => Effect.Effect<Option.Option<Item>, GatewayError>
): Effect.Effect<Input, GatewayError> => {
  const items: Array<Item> = []
  const typed: Array<TypedItem> = []
  let references = false
  for (const entry of entries) {
    if (entry._tag === "reference") references = true
    else {
      items.push(entry.item)
      typed.push(entry.typed)
    }
  }
  if (!references) return Effect.succeed({ items, typed })
  return Effect.map(
    Effect.forEach(entries, (entry) =>
      entry._tag === "item"
        ? Effect.succeed(entry)
        : Effect.flatMap(lookup(entry.id), (held) =>
            Option.isSome(held)
              ? Effect.succeed({ item: held.value, typed: heldItem(held.value) })
              : Effect.fail(Errors.invalidRequest("item_not_found", `${entry.at}.id: no output item ${entry.id} is held for reference`, { param: `${entry.at}.id` }))
          )
    ),
    (resolved) => ({ items: resolved.map((r) => r.item), typed: resolved.map((r) => r.typed) })
  )
}

const dataUrlType = (url: string): string | undefined => /^data:([^;,]+)[;,]/.exec(url)?.[1]


/** Every `input_file.file_url` in the items, to fetch before `toConversation`. */
export const fileUrls = (items: ReadonlyArray<TypedItem>): Array<string> => {
  const urls = new Set<string>()
  for (const item of items) {
    if (!isMessage(item) || typeof item.content === "string") continue
    for (const part of item.content) if (part.type === "input_file" && part.file_url) urls.add(part.file_url)
  }
  return [...urls]
}

/**
 * Every stored file the items name (`input_file` / `input_image` with `file_id`), to resolve
 * before `toConversation`; a file named by a history item is reported against `previous_response_id`.
 */
export const fileRefs = (items: ReadonlyArray<TypedItem>, offset: number): Array<FileRef> => {
  const refs: Array<FileRef> = []
  items.forEach((item, i) => {
    if (!isMessage(item) || typeof item.content === "string") return
    item.content.forEach((part, j) => {
      if ((part.type === "input_file" || part.type === "input_image") && part.file_id) {
        refs.push({ id: part.file_id, param: i < offset ? "previous_response_id" : `input.${i - offset}.content.${j}.file_id` })
      }
    })
  })
  return refs
}

const partsOf = (content: string | ReadonlyArray<ContentPart>, at: string, remote: ReadonlyMap<string, RemotePart>, files: ResolvedFiles): Result<Array<UserPart>> => {
  if (typeof content === "string") return Either.right([{ type: "text", text: content }])
  const parts: Array<UserPart> = []
  for (let j = 0; j < content.length; j++) {
    const p = content[j]
    const where = `${at}.content.${j}`
    switch (p.type) {
      case "input_text":
      case "output_text":
      case "text":
        parts.push({ type: "text", text: p.text })
        break
      case "refusal":
        parts.push({ type: "text", text: p.refusal })
        break
      case "image_url": {
        const url = typeof p.image_url === "string" ? p.image_url : p.image_url.url
        parts.push({ type: "image", url, ...(dataUrlType(url) ? { mediaType: dataUrlType(url)! } : {}) })
        break
      }
      case "input_image": {
        if (p.file_id) {
          const stored = files.get(p.file_id)
          if (stored === undefined) return Either.left(fileNotFound("openai", p.file_id, `${where}.file_id`))
          if (stored.kind !== "image") return Either.left(Errors.invalidRequest("invalid_file", `${where}.file_id: ${p.file_id} is not an image (it is ${stored.record.mimeType})`, { param: `${where}.file_id` }))
          parts.push(p.detail ? { ...(stored.part as Extract<UserPart, { type: "image" }>), detail: p.detail } : stored.part)
          break
        }
        if (!p.image_url) return Either.left(Errors.invalidRequest("invalid_request_error", `${where}: needs image_url or file_id`, { param: where }))
        parts.push({ type: "image", url: p.image_url, ...(p.detail ? { detail: p.detail } : {}), ...(dataUrlType(p.image_url) ? { mediaType: dataUrlType(p.image_url)! } : {}) })
        break
      }
      case "input_file": {
        if (p.file_id) {
          const stored = files.get(p.file_id)
          if (stored === undefined) return Either.left(fileNotFound("openai", p.file_id, `${where}.file_id`))
          if (stored.kind === "image") return Either.left(Errors.invalidRequest("invalid_file", `${where}.file_id: ${p.file_id} is an image; send it as input_image`, { param: `${where}.file_id` }))
          parts.push(stored.part)
          break
        }
        if (p.file_data) {
          const mediaType = dataUrlType(p.file_data) ?? "application/pdf"
          const data = p.file_data.startsWith("data:") ? p.file_data : `data:${mediaType};base64,${p.file_data}`
          parts.push({ type: "file", mediaType, data, ...(p.filename ? { filename: p.filename } : {}) })
          break
        }
        if (p.file_url) {
          const fetched = remote.get(p.file_url)
          if (fetched === undefined || fetched._tag === "failed") {
            return Either.left(Errors.invalidRequest("invalid_request_error", `${where}.file_url: ${fetched?._tag === "failed" ? fetched.why : "the file could not be fetched"}`, { param: `${where}.file_url` }))
          }
          parts.push(fetched.part)
          break
        }
        return Either.left(Errors.invalidRequest("invalid_request_error", `${where}: needs file_data, file_url or file_id`, { param: where }))
      }
    }
  }
  return Either.right(parts)
}

const textOf = (content: string | ReadonlyArray<ContentPart>): string =>
  typeof content === "string" ? content : content.map((p) => ("text" in p ? p.text : p.type === "refusal" ? p.refusal : "")).join("")

const outputText = (output: string | ReadonlyArray<ContentPart>): Array<TextPart> =>
  typeof output === "string" ? [{ type: "text", text: output }] : output.flatMap((p) => ("text" in p ? [{ type: "text" as const, text: p.text }] : []))

export interface Conversation {
  readonly system: ReadonlyArray<TextPart>
  readonly messages: ReadonlyArray<Message>
  /** additional_tools lists, oldest first */
  readonly additionalTools: ReadonlyArray<{ readonly tools: ReadonlyArray<Item>; readonly at: string }>
}

/**
 * The canonical conversation of a list of input items (history first). System and developer
 * messages become the system prompt after `instructions`; assistant text and calls join one
 * assistant turn; call outputs join one tool turn and must answer an earlier call.
 */
export const toConversation = (
  items: ReadonlyArray<TypedItem>,
  instructions: string | undefined,
  offset: number,
  remote: ReadonlyMap<string, RemotePart> = new Map(),
  files: ResolvedFiles = new Map()
): Result<Conversation> => {
  const system: Array<TextPart> = instructions ? [{ type: "text", text: instructions }] : []
  const messages: Array<Message> = []
  const additionalTools: Array<{ tools: ReadonlyArray<Item>; at: string }> = []
  const calls = new Map<string, string>()
  const at = (i: number) => `input.${i - offset}`
  const pushAssistant = (part: AssistantPart) => {
    const last = messages[messages.length - 1]
    if (last?.role === "assistant") messages[messages.length - 1] = { role: "assistant", parts: [...last.parts, part] }
    else messages.push({ role: "assistant", parts: [part] })
  }
  const pushResult = (part: ToolResultPart) => {
    const last = messages[messages.length - 1]
    if (last?.role === "tool") messages[messages.length - 1] = { role: "tool", parts: [...last.parts, part] }
    else messages.push({ role: "tool", parts: [part] })
  }
  for (let i = 0; i < items.length; i++) {
    const item = items[i]
    switch (item.type) {
      case undefined:
      case "message": {
        if (item.role === "system" || item.role === "developer") system.push({ type: "text", text: textOf(item.content) })
        else if (item.role === "assistant") {
          const text = textOf(item.content)
          if (text !== "") pushAssistant({ type: "text", text })
        } else {
          const parts = partsOf(item.content, at(i), remote, files)
          if (Either.isLeft(parts)) return Either.left(parts.left)
          messages.push({ role: "user", parts: parts.right })
        }
        break
      }
      case "function_call":
      case "custom_tool_call": {
        const flat = item.namespace !== undefined ? flattenName(item.namespace, item.name) : item.name
        calls.set(item.call_id, flat)
        const args = item.type === "function_call" ? item.arguments : JSON.stringify({ input: item.input })
        pushAssistant({ type: "tool_call", id: item.call_id, name: flat, arguments: args })
        break
      }
      case "function_call_output":
      case "custom_tool_call_output": {
        const name = calls.get(item.call_id)
        if (name === undefined) {
          return Either.left(
            Errors.invalidRequest("invalid_request_error", `${at(i)}.call_id: no earlier function_call has call_id ${item.call_id}`, { param: `${at(i)}.call_id` })
          )
        }
        pushResult({ type: "tool_result", callId: item.call_id, name, content: outputText(item.output) })
        break
      }
      case "additional_tools":
        additionalTools.push({ tools: item.tools, at: `${at(i)}.tools` })
        break
    }
  }
  return Either.right({ system, messages, additionalTools })
}

/** An input item in the full listing shape: a message has a type, a role and a list of parts. */
export const listingShape = (item: Item): Item => {
  if (itemType(item) !== "message") return item
  const role = String(item.role)
  const partType = role === "assistant" ? "output_text" : "input_text"
  const content = item.content
  const parts =
    typeof content === "string"
      ? [{ type: partType, text: content }]
      : Array.isArray(content)
        ? content.map((p: Item) => (p.type === "text" || p.type === "input_text" || p.type === "output_text" ? { type: partType, text: p.text } : p))
        : []
  return { id: item.id, type: "message", role, content: parts, ...(item.status !== undefined ? { status: item.status } : {}) }
}
