import { Effect, Redacted } from "effect"
import type { ProviderConfig } from "../../Config.js"
import type { ModelEvent } from "../../domain/Canonical.js"
import { UpstreamError } from "../../domain/Errors.js"
import { HttpUpstream, type UpstreamResponse } from "../HttpUpstream.js"
import { wholeSource, type AnswerSource, type Provider, type ProviderCall, type ProviderFactory } from "../Provider.js"
import { sseSource } from "../Sse.js"
import { parseJson, retryAfterOf, statusError, transportError, wholeText } from "../Upstream.js"
import { buildGenerateRequest } from "./Request.js"
import { eventsOfResponse, finishStream, type GoogleError, initialStreamState, isComplete, readChunk, readGoogleError } from "./Response.js"

/**
 * `{baseUrl}/v1beta/models/{model}:{method}`, without doubling a `/v1beta` the base URL already
 * ends in. A leading `models/` of the name is dropped; each `/`-separated segment is
 * percent-encoded and the `/` kept literal, so that a name cannot add a path or a method (`:`, `#`,
 * `?` are encoded) and a `<provider>/<model>` name still reaches a gateway upstream as written.
 */
export const generateUrl = (baseUrl: string, model: string, method: "generateContent" | "streamGenerateContent"): string => {
  const base = baseUrl.replace(/\/+$/, "")
  const root = /\/v1beta$/.test(base) ? base : `${base}/v1beta`
  const segments = model.replace(/^models\//, "").split("/")
  // a `.` or `..` segment would be resolved away by URL parsing and move the request to another
  // path on the upstream: such a name goes as one encoded segment
  const name = segments.some((s) => s === "." || s === "..") ? encodeURIComponent(segments.join("/")) : segments.map(encodeURIComponent).join("/")
  return `${root}/models/${name}:${method}${method === "streamGenerateContent" ? "?alt=sse" : ""}`
}

/** The HTTP status a google.rpc status name stands for, for errors reported inside a 200 answer. */
const rpcStatus: Readonly<Record<string, number>> = {
  INVALID_ARGUMENT: 400,
  FAILED_PRECONDITION: 400,
  OUT_OF_RANGE: 400,
  UNAUTHENTICATED: 401,
  PERMISSION_DENIED: 403,
  NOT_FOUND: 404,
  ABORTED: 409,
  RESOURCE_EXHAUSTED: 429,
  CANCELLED: 499,
  INTERNAL: 500,
  UNKNOWN: 500,
  DATA_LOSS: 500,
  NOT_IMPLEMENTED: 501,
  UNAVAILABLE: 503,
  DEADLINE_EXCEEDED: 504
}

/** ErrorInfo reasons that mean the key itself was refused (Google answers a bad key with 400). */
const keyRefused = new Set(["API_KEY_INVALID", "API_KEY_SERVICE_BLOCKED", "API_KEY_HTTP_REFERRER_BLOCKED", "API_KEY_IP_ADDRESS_BLOCKED"])

/**
 * The typed error for a Google error: by the HTTP status when the call failed, else by the code or
 * status name the body reports (an error chunk mid-stream). The provider's text is read only to
 * spot overload, as statusError does; a RetryInfo delay stands in for a missing Retry-After.
 */
const googleError = (provider: string, error: GoogleError | undefined, httpStatus: number | undefined, retryAfter: number | undefined): UpstreamError => {
  const status = httpStatus ?? (error?.status !== undefined ? rpcStatus[error.status] : undefined) ?? error?.code ?? 500
  const retry = retryAfter ?? error?.retryDelay
  if (error !== undefined && error.reasons.some((r) => keyRefused.has(r))) {
    return new UpstreamError({ provider, reason: "auth", upstreamStatus: status, message: "credentials refused" })
  }
  return statusError(provider, status, error?.message ?? "", retry)
}

/**
 * The `gemini` provider type: a native generateContent upstream (Google's Generative Language API,
 * v1beta). `stream` makes a streamGenerateContent SSE call, each frame a whole response chunk;
 * `complete` makes one generateContent call whose answer is turned into the same events. The key
 * travels in `x-goog-api-key`, never in the URL.
 */
export const makeGeminiProvider = (name: string, config: ProviderConfig) =>
  Effect.gen(function* () {
    const upstream = yield* HttpUpstream
    const baseUrl = config.baseUrl ?? ""
    const headers: Record<string, string> = { ...config.headers, accept: "application/json, text/event-stream", "content-type": "application/json" }
    if (config.apiKey !== undefined) headers["x-goog-api-key"] = Redacted.value(config.apiKey)
    const badResponse = (message: string) => new UpstreamError({ provider: name, reason: "bad_response", message })

    /** The error of an answer with an error status, from its body text. */
    const statusFailure = (status: number, answerHeaders: UpstreamResponse["headers"], text: string): UpstreamError =>
      googleError(name, readGoogleError(parseJson(text)) ?? { message: text, reasons: [] }, status, retryAfterOf({ headers: answerHeaders }))

    const failed = (response: UpstreamResponse) =>
      response.text.pipe(
        Effect.orElseSucceed(() => ""),
        Effect.flatMap((text) => Effect.fail(statusFailure(response.status, response.headers, text)))
      )

    const requestOf = (call: ProviderCall, method: "generateContent" | "streamGenerateContent") => ({
      url: generateUrl(baseUrl, call.target.model, method),
      headers,
      body: JSON.stringify(buildGenerateRequest(call.target, call.request)),
      deadline: call.deadline
    })

    const send = (call: ProviderCall, method: "generateContent" | "streamGenerateContent") =>
      upstream
        .post(requestOf(call, method))
        .pipe(
          Effect.mapError(transportError(name)),
          Effect.flatMap((response) => (response.status >= 200 && response.status < 300 ? Effect.succeed(response) : failed(response)))
        )

    // the whole answer in one suspension (HttpUpstream.postWhole)
    const complete = (call: ProviderCall): Effect.Effect<ReadonlyArray<ModelEvent>, UpstreamError> =>
      Effect.flatMap(wholeText(name, upstream.postWhole(requestOf(call, "generateContent")), statusFailure), (text) => {
        const body = parseJson(text)
        if (body === undefined) return Effect.fail(badResponse("the answer is not JSON"))
        const result = eventsOfResponse(body)
        switch (result._tag) {
          case "Events":
            return Effect.succeed(result.events)
          case "Error":
            return Effect.fail(googleError(name, result.error, undefined, undefined))
          case "Invalid":
            return Effect.fail(badResponse(result.message))
        }
      })

    const streamed = (call: ProviderCall): AnswerSource => {
      const state = initialStreamState()
      // read to the end: the chunk with finishReason may be followed by one with the final usage
      return sseSource(send(call, "streamGenerateContent"), transportError(name), {
        frame: (frame) => {
          const data = parseJson(frame.data)
          if (data === undefined) return badResponse("a stream chunk is not JSON")
          const result = readChunk(state, data)
          switch (result._tag) {
            case "Events":
              return result.events
            case "Error":
              return googleError(name, result.error, undefined, undefined)
            case "Invalid":
              return badResponse(result.message)
          }
        },
        done: () => false,
        end: () => (isComplete(state) ? finishStream(state) : badResponse("the stream ended before the answer was complete"))
      })
    }

    // a streamed answer or one non-streamed call; the upstream request's abort timer ends either at the deadline
    const provider: Provider = { open: (call) => (call.request.stream ? streamed(call) : wholeSource(complete(call))) }
    return provider
  })

const noParams: ReadonlyArray<string> = []

/** Factory for the registry; needs the HttpUpstream. */
export const GeminiProviderFactory = Effect.map(HttpUpstream, (upstream): ProviderFactory => ({
  type: "gemini",
  make: (name, config) => makeGeminiProvider(name, config).pipe(Effect.provideService(HttpUpstream, upstream)),
  // generateContent has a field for every sampling param
  refusedParams: () => noParams
}))
