import { Effect, Redacted } from "effect"
import type { ProviderConfig } from "../../Config.js"
import type { ModelEvent } from "../../domain/Canonical.js"
import { UpstreamError } from "../../domain/Errors.js"
import { HttpUpstream, type UpstreamResponse } from "../HttpUpstream.js"
import { wholeSource, type AnswerSource, type Provider, type ProviderCall, type ProviderFactory } from "../Provider.js"
import { sseSource } from "../Sse.js"
import { overloadText, parseJson, retryAfterOf, statusError, transportError, wholeText } from "../Upstream.js"
import { buildChatRequest } from "./Request.js"
import { eventsOfCompletion, finishStream, initialStreamState, readChunk, readInlineError } from "./Response.js"

const argumentsAreJson = (events: ReadonlyArray<ModelEvent>) =>
  events.every((e) => e._tag !== "ToolCall" || parseJson(e.call.arguments) !== undefined)

/**
 * The `openai` provider type: every OpenAI-compatible chat-completions upstream over HTTP. `stream`
 * makes an SSE upstream call (tool calls assembled and emitted whole); `complete` makes one JSON
 * call whose answer is turned into the same events.
 */
export const makeOpenAiProvider = (name: string, config: ProviderConfig) =>
  Effect.gen(function* () {
    const upstream = yield* HttpUpstream
    const baseUrl = (config.baseUrl ?? "").replace(/\/+$/, "")
    const url = `${baseUrl}/chat/completions`
    const headers: Record<string, string> = { ...config.headers, accept: "application/json, text/event-stream", "content-type": "application/json" }
    if (config.apiKey !== undefined) headers.authorization = `Bearer ${Redacted.value(config.apiKey)}`
    const badResponse = (message: string) => new UpstreamError({ provider: name, reason: "bad_response", message })

    const requestOf = (call: ProviderCall) => ({ url, headers, body: JSON.stringify(buildChatRequest(call.target, call.request, baseUrl)), deadline: call.deadline })
    /** The error of an answer with an error status, from its body text. */
    const statusFailure = (status: number, answerHeaders: UpstreamResponse["headers"], text: string) => statusError(name, status, text, retryAfterOf({ headers: answerHeaders }))

    const send = (call: ProviderCall) =>
      upstream.post(requestOf(call)).pipe(
        Effect.mapError(transportError(name)),
        Effect.flatMap((response) =>
          response.status >= 200 && response.status < 300
            ? Effect.succeed(response)
            : response.text.pipe(
                Effect.orElseSucceed(() => ""),
                Effect.flatMap((text) => Effect.fail(statusFailure(response.status, response.headers, text)))
              )
        )
      )

    const inlineError = (value: unknown): UpstreamError | undefined => {
      const inline = readInlineError(value)
      if (inline === undefined) return undefined
      return overloadText.test(inline.message)
        ? new UpstreamError({ provider: name, reason: "overloaded", message: "overloaded" })
        : new UpstreamError({ provider: name, reason: "server_error", message: "the provider reported an error" })
    }

    // the whole answer in one suspension (HttpUpstream.postWhole)
    const complete = (call: ProviderCall): Effect.Effect<ReadonlyArray<ModelEvent>, UpstreamError> =>
      Effect.flatMap(wholeText(name, upstream.postWhole(requestOf(call)), statusFailure), (text) => {
        const body = parseJson(text)
        const error = body === undefined ? badResponse("the answer is not JSON") : inlineError(body)
        if (error !== undefined) return Effect.fail(error)
        const events = eventsOfCompletion(body)
        if (events === undefined) return Effect.fail(badResponse("the answer has no choice"))
        if (!argumentsAreJson(events)) return Effect.fail(badResponse("a tool call's arguments are not JSON"))
        return Effect.succeed(events)
      })

    const streamed = (call: ProviderCall): AnswerSource => {
      const state = initialStreamState()
      return sseSource(send(call), transportError(name), {
        frame: (frame) => {
          if (frame.data === "[DONE]") {
            state.done = true
            return []
          }
          const chunk = parseJson(frame.data)
          if (chunk === undefined) return badResponse("a stream chunk is not JSON")
          return inlineError(chunk) ?? readChunk(state, chunk)
        },
        done: () => state.done,
        end: () => {
          if (!state.done && state.finish === undefined) return badResponse("the stream ended before the answer was complete")
          const events = finishStream(state)
          return argumentsAreJson(events) ? events : badResponse("a tool call's arguments are not JSON")
        }
      })
    }

    // a streamed answer or one non-streamed call; the upstream request's abort timer ends either at the deadline
    const provider: Provider = { open: (call) => (call.request.stream ? streamed(call) : wholeSource(complete(call))) }
    return provider
  })

/** Sampling params chat completions has no field for: never sent. */
const neverSent: ReadonlyArray<string> = ["top_k"]

/** Factory for the registry; needs the HttpUpstream. */
export const OpenAiProviderFactory = Effect.map(HttpUpstream, (upstream): ProviderFactory => ({
  type: "openai",
  make: (name, config) => makeOpenAiProvider(name, config).pipe(Effect.provideService(HttpUpstream, upstream)),
  refusedParams: () => neverSent
}))
