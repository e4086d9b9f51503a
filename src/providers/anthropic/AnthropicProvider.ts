import { Effect, Redacted } from "effect"
import type { ProviderConfig } from "../../Config.js"
import type { ModelEvent } from "../../domain/Canonical.js"
import { UpstreamError } from "../../domain/Errors.js"
import { HttpUpstream, type UpstreamResponse } from "../HttpUpstream.js"
import { wholeSource, type AnswerSource, type Provider, type ProviderCall, type ProviderFactory } from "../Provider.js"
import { sseSource } from "../Sse.js"
import { parseJson, retryAfterOf, statusError, transportError, wholeText } from "../Upstream.js"
import { defaultDeniedBetas, upstreamBetas } from "./Betas.js"
import { buildMessagesRequest } from "./Request.js"
import { refusedParams, unforcedToolChoice } from "./ThinkingLimits.js"
import { eventsOfMessage, finishStream, initialStreamState, readStreamEvent, readWireError } from "./Response.js"

/** The Messages API version header sent upstream. */
export const anthropicVersion = "2023-06-01"

/** `{baseUrl}/v1/messages`, without doubling a `/v1` the base URL already ends in. */
export const messagesUrl = (baseUrl: string): string => {
  const base = baseUrl.replace(/\/+$/, "")
  return /\/v1$/.test(base) ? `${base}/messages` : `${base}/v1/messages`
}

/** The typed error for an error the upstream reported by type (body of a failed call, or an SSE `error` event). */
const wireErrorOf = (provider: string, type: string, status?: number): UpstreamError => {
  const base = { provider, ...(status !== undefined ? { upstreamStatus: status } : {}) }
  switch (type) {
    case "overloaded_error":
      return new UpstreamError({ ...base, reason: "overloaded", message: "overloaded" })
    case "rate_limit_error":
      return new UpstreamError({ ...base, reason: "rate_limited", message: "rate limited" })
    case "authentication_error":
    case "permission_error":
      return new UpstreamError({ ...base, reason: "auth", message: "credentials refused" })
    case "invalid_request_error":
      return new UpstreamError({ ...base, reason: "bad_request", message: "request refused" })
    case "timeout_error":
      return new UpstreamError({ ...base, reason: "timeout", message: "timeout" })
    default:
      return new UpstreamError({ ...base, reason: "server_error", message: "the provider reported an error" })
  }
}

/**
 * The body fields `POST /v1/messages/count_tokens` takes (Anthropic's API reference): the input a
 * call sends and the settings that change how it is counted. Any other field is refused there.
 */
const countFields: ReadonlySet<string> = new Set(["model", "messages", "system", "tools", "tool_choice", "thinking", "output_config", "context_management", "mcp_servers"])

/**
 * The `anthropic` provider type: a native Messages API upstream. `stream` makes an SSE call (tool
 * calls assembled and emitted whole, thinking signatures carried on a final empty ReasoningDelta);
 * `complete` makes one non-streamed call whose `message` is turned into the same events.
 */
export const makeAnthropicProvider = (name: string, config: ProviderConfig) =>
  Effect.gen(function* () {
    const upstream = yield* HttpUpstream
    const url = messagesUrl(config.baseUrl ?? "")
    const headers: Record<string, string> = {
      "anthropic-version": anthropicVersion,
      ...config.headers,
      accept: "application/json, text/event-stream",
      "content-type": "application/json"
    }
    if (config.apiKey !== undefined) headers["x-api-key"] = Redacted.value(config.apiKey)
    const badResponse = (message: string) => new UpstreamError({ provider: name, reason: "bad_response", message })

    /** The error of an answer with an error status, from its body text. */
    const statusFailure = (status: number, answerHeaders: UpstreamResponse["headers"], text: string): UpstreamError => {
      const retryAfter = retryAfterOf({ headers: answerHeaders })
      const wire = readWireError(parseJson(text))
      if (wire?.type === "overloaded_error") {
        return new UpstreamError({ provider: name, reason: "overloaded", upstreamStatus: status, ...(retryAfter !== undefined ? { retryAfter } : {}), message: "overloaded" })
      }
      return statusError(name, status, text, retryAfter)
    }

    const failed = (response: UpstreamResponse) =>
      response.text.pipe(
        Effect.orElseSucceed(() => ""),
        Effect.flatMap((text) => Effect.fail(statusFailure(response.status, response.headers, text)))
      )

    // the operator's own `anthropic-beta` (any spelling of the name) is merged with the client's flags not denied
    const configuredBeta = Object.entries(headers).find(([key]) => key.toLowerCase() === "anthropic-beta")
    const baseHeaders = configuredBeta === undefined ? headers : Object.fromEntries(Object.entries(headers).filter(([key]) => key !== configuredBeta[0]))
    const deniedBetas = config.denyBetas ?? defaultDeniedBetas
    const headersOf = (call: ProviderCall): Record<string, string> => {
      const betas = upstreamBetas(configuredBeta?.[1], call.request.betas, deniedBetas)
      return betas === undefined ? baseHeaders : { ...baseHeaders, "anthropic-beta": betas }
    }

    const requestOf = (call: ProviderCall) => ({
      url,
      headers: headersOf(call),
      // with thinking on, a forced tool choice would be refused: it goes as an instruction instead
      body: JSON.stringify(buildMessagesRequest(call.target, unforcedToolChoice(call.target, call.request))),
      deadline: call.deadline
    })

    const send = (call: ProviderCall) =>
      upstream
        .post(requestOf(call))
        .pipe(
          Effect.mapError(transportError(name)),
          Effect.flatMap((response) => (response.status >= 200 && response.status < 300 ? Effect.succeed(response) : failed(response)))
        )

    // the whole answer in one suspension (HttpUpstream.postWhole)
    const complete = (call: ProviderCall): Effect.Effect<ReadonlyArray<ModelEvent>, UpstreamError> =>
      Effect.flatMap(wholeText(name, upstream.postWhole(requestOf(call)), statusFailure), (text) => {
        const body = parseJson(text)
        if (body === undefined) return Effect.fail(badResponse("the answer is not JSON"))
        const wire = readWireError(body)
        if (wire !== undefined) return Effect.fail(wireErrorOf(name, wire.type))
        const result = eventsOfMessage(body)
        return result._tag === "Events" ? Effect.succeed(result.events) : Effect.fail(badResponse(result.message))
      })

    const streamed = (call: ProviderCall): AnswerSource => {
      const state = initialStreamState()
      return sseSource(send(call), transportError(name), {
        frame: (frame) => {
          const data = parseJson(frame.data)
          if (data === undefined) return badResponse("a stream event is not JSON")
          const result = readStreamEvent(state, frame.event, data)
          switch (result._tag) {
            case "Events":
              return result.events
            case "Invalid":
              return badResponse(result.message)
            case "Error":
              return wireErrorOf(name, result.type)
          }
        },
        done: () => state.done,
        end: () => {
          if (!state.done) return badResponse("the stream ended before the answer was complete")
          const result = finishStream(state)
          return result._tag === "Events" ? result.events : badResponse(result.message)
        }
      })
    }

    /**
     * `POST {baseUrl}/v1/messages/count_tokens` for the body a call would send, with only the fields
     * that endpoint takes: a variant's other params (`service_tier`, `metadata`, ...) would make it
     * refuse the count, and `max_tokens`, `stream` and sampling are not part of the input.
     */
    const countTokens = (call: ProviderCall): Effect.Effect<number, UpstreamError> => {
      const full = buildMessagesRequest(call.target, unforcedToolChoice(call.target, call.request))
      const body = Object.fromEntries(Object.entries(full).filter(([key]) => countFields.has(key)))
      const request = { url: `${url}/count_tokens`, headers: headersOf(call), body: JSON.stringify(body), deadline: call.deadline }
      return Effect.flatMap(wholeText(name, upstream.postWhole(request), statusFailure), (text) => {
        const answer = parseJson(text)
        const tokens = typeof answer === "object" && answer !== null && "input_tokens" in answer ? answer.input_tokens : undefined
        return typeof tokens === "number" && Number.isInteger(tokens) && tokens >= 0 ? Effect.succeed(tokens) : Effect.fail(badResponse("the count is not {input_tokens}"))
      })
    }

    // a streamed answer or one non-streamed call; the upstream request's abort timer ends either at the deadline
    const provider: Provider = { open: (call) => (call.request.stream ? streamed(call) : wholeSource(complete(call))), countTokens }
    return provider
  })

/** Factory for the registry; needs the HttpUpstream. */
export const AnthropicProviderFactory = Effect.map(HttpUpstream, (upstream): ProviderFactory => ({
  type: "anthropic",
  make: (name, config) => makeAnthropicProvider(name, config).pipe(Effect.provideService(HttpUpstream, upstream)),
  refusedParams
}))
