/**
 * The canonical request and event model. Every protocol decodes into `CanonicalRequest`; every
 * provider produces a stream of `ModelEvent`s; a non-streamed answer is `foldEvents` of that stream.
 */

/** A cache breakpoint set by the caller (Messages-style) or by the gateway. */
export interface CacheControl {
  readonly ttl: "5m" | "1h"
}

export interface TextPart {
  readonly type: "text"
  readonly text: string
  readonly cache?: CacheControl
}

/**
 * Claude Code's attribution block (`x-anthropic-billing-header: ...`), which it sends as the first
 * system block: the first-party API strips it only there, so it stays first, byte-identical, and
 * the gateway puts no cache breakpoint on it.
 */
export const isAttributionBlock = (part: TextPart | undefined): boolean => part !== undefined && part.text.startsWith("x-anthropic-billing-header:")

/** An image, as a data URL (`data:image/png;base64,...`) or an http(s) URL. */
export interface ImagePart {
  readonly type: "image"
  readonly url: string
  readonly mediaType?: string
  readonly detail?: string
  readonly cache?: CacheControl
}

/** A document (PDF) delivered to the model as a data URL. */
export interface FilePart {
  readonly type: "file"
  readonly mediaType: string
  /** data URL */
  readonly data: string
  readonly filename?: string
  readonly cache?: CacheControl
}

/** A whole tool call made by the model in an earlier assistant turn. */
export interface ToolCallPart {
  readonly type: "tool_call"
  readonly id: string
  readonly name: string
  /** JSON text of the arguments */
  readonly arguments: string
}

/** The result of a tool call, sent back by the caller in a tool/user turn. */
export interface ToolResultPart {
  readonly type: "tool_result"
  readonly callId: string
  readonly name?: string
  readonly content: ReadonlyArray<TextPart | ImagePart>
  readonly isError?: boolean
  readonly cache?: CacheControl
}

/**
 * The provider family that made a reasoning signature (or redacted reasoning). A signature is sent
 * only to an upstream of the same family: another family's upstream refuses it, or worse reads it.
 */
export type SignatureFamily = "anthropic" | "gemini" | "mock"

/** Reasoning text from an earlier assistant turn, with the provider signature when it had one. */
export interface ReasoningPart {
  readonly type: "reasoning"
  readonly text: string
  readonly signature?: string
  /** opaque redacted reasoning data (no text) */
  readonly redacted?: string
  /** who made `signature` / `redacted`; without it they are foreign to every upstream */
  readonly family?: SignatureFamily
}

export type UserPart = TextPart | ImagePart | FilePart
export type AssistantPart = TextPart | ToolCallPart | ReasoningPart
export type Part = TextPart | ImagePart | FilePart | ToolCallPart | ToolResultPart | ReasoningPart

export type Message =
  | { readonly role: "user"; readonly parts: ReadonlyArray<UserPart> }
  | { readonly role: "assistant"; readonly parts: ReadonlyArray<AssistantPart> }
  | { readonly role: "tool"; readonly parts: ReadonlyArray<ToolResultPart> }

/** A JSON Schema object, as the caller sent it. */
export type JsonSchema = { readonly [key: string]: unknown }

export interface ToolDefinition {
  readonly name: string
  readonly description?: string
  /** JSON Schema of the arguments (an object schema) */
  readonly parameters: JsonSchema
  /** a cache breakpoint after this tool (the gateway's own, Messages-style placement) */
  readonly cache?: CacheControl
}

export type ToolChoice =
  | { readonly type: "auto" }
  | { readonly type: "none" }
  | { readonly type: "required" }
  | { readonly type: "tool"; readonly name: string }

export interface Sampling {
  readonly temperature?: number
  readonly topP?: number
  readonly topK?: number
  readonly seed?: number
  readonly presencePenalty?: number
  readonly frequencyPenalty?: number
  /** stop sequences sent to the model (chat-style); the gateway matches its own for other protocols */
  readonly stop?: ReadonlyArray<string>
}

/** Names of sampling parameters as the wire (and `rejects` in the config) spells them. */
export const samplingParamNames: Record<keyof Omit<Sampling, "stop">, string> = {
  temperature: "temperature",
  topP: "top_p",
  topK: "top_k",
  seed: "seed",
  presencePenalty: "presence_penalty",
  frequencyPenalty: "frequency_penalty"
}

/** Structured output: the caller's schema, offered to the model as the forced tool `respond`. */
export interface StructuredOutput {
  readonly name: string
  readonly schema: JsonSchema
  /** true when the caller asked for a bare JSON object with no schema */
  readonly jsonObject: boolean
}

export interface CanonicalRequest {
  readonly system: ReadonlyArray<TextPart>
  readonly messages: ReadonlyArray<Message>
  readonly tools: ReadonlyArray<ToolDefinition>
  readonly toolChoice: ToolChoice
  readonly sampling: Sampling
  readonly maxOutputTokens?: number
  /** reasoning level asked for by the request (used to pick a variant) */
  readonly reasoningEffort?: string
  readonly structured?: StructuredOutput
  readonly parallelToolCalls: boolean
  /** whether the caller streams; providers may use a non-streamed upstream call otherwise */
  readonly stream: boolean
  readonly user?: string
  /**
   * the client's own name for the conversation (`prompt_cache_key`, Messages `metadata.user_id`):
   * with conversation affinity, the calls that carry the same one stay on one target
   */
  readonly conversation?: string
  /**
   * the client's Messages beta flags (`anthropic-beta`/`messages-beta`), for a native Messages
   * upstream, which forwards those on its allow-list; other provider types ignore them
   */
  readonly betas?: ReadonlyArray<string>
}

export type FinishReason = "stop" | "length" | "tool_calls" | "content_filter"

export interface Usage {
  /** all input tokens, cache reads included */
  readonly inputTokens: number
  /** all output tokens, reasoning included */
  readonly outputTokens: number
  readonly cacheReadTokens: number
  readonly cacheWriteTokens: number
  readonly reasoningTokens: number
}

export const emptyUsage: Usage = {
  inputTokens: 0,
  outputTokens: 0,
  cacheReadTokens: 0,
  cacheWriteTokens: 0,
  reasoningTokens: 0
}

export const addUsage = (a: Usage, b: Usage): Usage => ({
  inputTokens: a.inputTokens + b.inputTokens,
  outputTokens: a.outputTokens + b.outputTokens,
  cacheReadTokens: a.cacheReadTokens + b.cacheReadTokens,
  cacheWriteTokens: a.cacheWriteTokens + b.cacheWriteTokens,
  reasoningTokens: a.reasoningTokens + b.reasoningTokens
})

export interface ToolCall {
  readonly id: string
  readonly name: string
  readonly arguments: string
}

/** The events every provider produces. Tool calls arrive whole. */
export type ModelEvent =
  | { readonly _tag: "TextDelta"; readonly text: string }
  | { readonly _tag: "ReasoningDelta"; readonly text: string; readonly signature?: string; readonly family?: SignatureFamily }
  | { readonly _tag: "RedactedReasoning"; readonly data: string }
  | { readonly _tag: "ToolCall"; readonly call: ToolCall }
  | { readonly _tag: "Usage"; readonly usage: Usage }
  | { readonly _tag: "Finish"; readonly reason: FinishReason }
  /** nothing to show yet (the gateway runs host tools): the stream keeps its connection alive */
  | { readonly _tag: "KeepAlive" }

export const ModelEvent = {
  text: (text: string): ModelEvent => ({ _tag: "TextDelta", text }),
  /** reasoning text; a signature is tagged with the family of the upstream that made it */
  reasoning: (text: string, signature?: string, family?: SignatureFamily): ModelEvent =>
    signature === undefined ? { _tag: "ReasoningDelta", text } : family === undefined ? { _tag: "ReasoningDelta", text, signature } : { _tag: "ReasoningDelta", text, signature, family },
  redacted: (data: string): ModelEvent => ({ _tag: "RedactedReasoning", data }),
  toolCall: (call: ToolCall): ModelEvent => ({ _tag: "ToolCall", call }),
  usage: (usage: Usage): ModelEvent => ({ _tag: "Usage", usage }),
  finish: (reason: FinishReason): ModelEvent => ({ _tag: "Finish", reason }),
  keepAlive: { _tag: "KeepAlive" } as ModelEvent
} as const

/** A whole answer: the fold of a model event stream. */
export interface Answer {
  readonly text: string
  readonly reasoning: string
  /** the answer's (last) reasoning signature */
  readonly reasoningSignature?: string
  /** the family that made `reasoningSignature` */
  readonly reasoningFamily?: SignatureFamily
  readonly redacted: ReadonlyArray<string>
  readonly toolCalls: ReadonlyArray<ToolCall>
  readonly usage: Usage
  readonly finishReason: FinishReason
}

export const emptyAnswer: Answer = {
  text: "",
  reasoning: "",
  redacted: [],
  toolCalls: [],
  usage: emptyUsage,
  finishReason: "stop"
}

/** One step of the fold. Usage events replace earlier ones (providers report running totals). */
export const foldEvent = (answer: Answer, event: ModelEvent): Answer => {
  switch (event._tag) {
    case "TextDelta":
      return { ...answer, text: answer.text + event.text }
    case "ReasoningDelta":
      // providers emit each signature whole: a later one replaces (joined, two would be neither)
      return event.signature === undefined
        ? { ...answer, reasoning: answer.reasoning + event.text }
        : { ...answer, reasoning: answer.reasoning + event.text, reasoningSignature: event.signature, reasoningFamily: event.family }
    case "RedactedReasoning":
      return { ...answer, redacted: [...answer.redacted, event.data] }
    case "ToolCall":
      return { ...answer, toolCalls: [...answer.toolCalls, event.call] }
    case "Usage":
      return { ...answer, usage: event.usage }
    case "Finish":
      return { ...answer, finishReason: event.reason }
    case "KeepAlive":
      return answer
  }
}

export const foldEvents = (events: Iterable<ModelEvent>): Answer => {
  let answer = emptyAnswer
  for (const event of events) answer = foldEvent(answer, event)
  return answer
}
