import { Effect, Either, Stream } from "effect"
import { addUsage, emptyUsage, foldEvents, type Answer, type ModelEvent } from "../../domain/Canonical.js"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import { resolveStructured, withRespondTool } from "../../domain/Structured.js"
import { estimateTokens, geminiCalibration } from "../../domain/TokenEstimate.js"
import { callerOf, Reply, type RequestContext, type Route } from "../../http/Route.js"
import { encodedPull, writePulled, writeStream } from "../../http/Writer.js"
import { Catalog, type ModelEntry } from "../../services/Catalog.js"
import { ModelRunner, type RunOptions } from "../../services/ModelRunner.js"
import { decodeAt } from "../Decode.js"
import { holdStructured } from "../HeldBack.js"
import { makeFileResolver } from "../FileParts.js"
import { fetchEach, makeRemoteParts } from "../RemoteParts.js"
import { makeStopFilter } from "../StopSequences.js"
import { decodeGemini, fileUris, refuse, type DecodedGemini } from "./Decode.js"
import { arrayForm, makeCandidateEncoder, newResponseId, responseBody, sseForm, usageChunk, type GeminiMeta, type StreamItem } from "./Encode.js"
import { isModelMethod, parseModelAction, parseModelName } from "./Path.js"
import { camelKeys, CountTokensRequest, GenerateContentRequest } from "./Schema.js"

const decodeRequest = decodeAt(GenerateContentRequest)
const decodeCount = decodeAt(CountTokensRequest)

/** The body as a camelCase object (every field is read in camelCase and snake_case). */
const bodyObject = (body: unknown): Effect.Effect<Record<string, unknown>, GatewayError> =>
  typeof body === "object" && body !== null && !Array.isArray(body)
    ? Effect.succeed(camelKeys(body) as Record<string, unknown>)
    : Effect.fail(Errors.invalidRequest("invalid_argument", "The request body must be a JSON object"))

/** Response headers of a model answer: every candidate's session, and the params left out. */
const runHeaders = (runs: ReadonlyArray<{ readonly sessionId: string; readonly droppedParams: ReadonlyArray<string> }>): Record<string, string> => {
  const headers: Record<string, string> = { "x-gateway-session": runs.map((r) => r.sessionId).join(",") }
  const dropped = [...new Set(runs.flatMap((r) => r.droppedParams))]
  if (dropped.length > 0) headers["x-gateway-dropped-params"] = dropped.join(",")
  return headers
}

/** The Gemini model entry of a catalog entry (`models/<id>`). */
const modelEntry = (entry: ModelEntry): Record<string, unknown> => ({
  name: `models/${entry.id}`,
  displayName: entry.id,
  ...(entry.contextLimit !== undefined ? { inputTokenLimit: entry.contextLimit } : {}),
  supportedGenerationMethods: ["generateContent", "streamGenerateContent", "countTokens"]
})

/** The events one candidate passes on: stop sequences matched by the gateway on answer text. */
const candidateEvents = (decoded: DecodedGemini): ((event: ModelEvent) => ReadonlyArray<ModelEvent>) => makeStopFilter(decoded.stopSequences).event

export const geminiRoutes = Effect.gen(function* () {
  const runner = yield* ModelRunner
  const catalog = yield* Catalog
  const remoteParts = yield* makeRemoteParts
  const resolveFiles = yield* makeFileResolver

  /** Decode a generate-content body, fetching the http(s) `fileData` it names first. */
  const decode = (wire: Record<string, unknown>, ctx: RequestContext, stream: boolean) =>
    Effect.gen(function* () {
      const request = yield* decodeRequest(wire, "")
      const uris = fileUris(request.contents, ctx.origin)
      const files = yield* resolveFiles(ctx.principal.app, uris.stored, "gemini")
      const remote = yield* fetchEach(uris.remote, (uri) => remoteParts(uri, { images: true }))
      return yield* Either.match(decodeGemini(request, { maxChoices: ctx.app.maxChoices, stream, remote, files, origin: ctx.origin }), { onLeft: Effect.fail, onRight: Effect.succeed })
    })

  const runOptions = (model: string, decoded: DecodedGemini, ctx: RequestContext): RunOptions => ({
    caller: callerOf(ctx, undefined, model),
    model,
    request: withRespondTool(decoded.request),
    app: ctx.app,
    deadline: ctx.deadline,
    ...(decoded.reasoning !== undefined ? { resolve: { reasoningEffort: decoded.reasoning.level, nearestAbove: decoded.reasoning.nearestAbove } } : {})
  })

  const generate = (ctx: RequestContext, model: string) =>
    Effect.gen(function* () {
      const decoded = yield* decode(yield* bodyObject(yield* ctx.json), ctx, false)
      const options = runOptions(model, decoded, ctx)
      const indexes = Array.from({ length: decoded.candidateCount }, (_, i) => i)
      // one independent call per candidate, run together; the first failure interrupts the others
      const runs = yield* Effect.forEach(indexes, () => runner.complete(options), { concurrency: indexes.length > 1 ? "unbounded" : 1 })
      const answers: Array<Answer> = []
      let fallback = false
      for (const run of runs) {
        let answer = foldEvents(run.events.flatMap(candidateEvents(decoded)))
        if (decoded.request.structured !== undefined) {
          const resolved = resolveStructured(answer, decoded.request.structured)
          if (resolved._tag === "error") return yield* resolved.error
          answer = resolved.result.answer
          fallback ||= resolved.result.fallback
        }
        answers.push(answer)
      }
      const usage = answers.reduce((sum, a) => addUsage(sum, a.usage), emptyUsage)
      const meta: GeminiMeta = { modelVersion: model, responseId: newResponseId(), multi: decoded.candidateCount > 1 }
      const headers = runHeaders(runs)
      if (fallback) headers["x-gateway-structured-fallback"] = "text"
      return Reply.json(responseBody(meta, answers, usage), { headers })
    })

  const streamGenerate = (ctx: RequestContext, model: string) =>
    Effect.gen(function* () {
      const alt = ctx.query.get("alt")
      if (alt !== null && alt !== "sse" && alt !== "json") return yield* refuse("alt", "must be sse or json")
      const decoded = yield* decode(yield* bodyObject(yield* ctx.json), ctx, true)
      const options = runOptions(model, decoded, ctx)
      const indexes = Array.from({ length: decoded.candidateCount }, (_, i) => i)
      const meta: GeminiMeta = { modelVersion: model, responseId: newResponseId(), multi: decoded.candidateCount > 1 }
      return yield* Effect.scoped(
        Effect.gen(function* () {
          // every candidate has its first event (or failed) before anything is written: a failure is an HTTP error
          // (one candidate runs in this fiber: an unbounded forEach forks two fibers even for one element)
          const runs = yield* Effect.forEach(indexes, () => Effect.flatMap(runner.start(options), (run) => holdStructured(run, decoded.request.structured)), {
            concurrency: indexes.length > 1 ? "unbounded" : 1
          })
          const form = alt === "sse" ? sseForm() : arrayForm()
          const headers = { ...runHeaders(runs), ...ctx.idHeaders, "content-type": form.contentType, "cache-control": "no-cache" }
          if (runs.length === 1) {
            // one candidate: its pull straight to the socket, no stream stages
            const encoder = makeCandidateEncoder(meta, 0)
            const events = candidateEvents(decoded)
            const body = encodedPull(runs[0].pull, {
              start: form.open,
              encode: (chunk) => {
                let text = ""
                for (const event of chunk) for (const candidate of events(event)) for (const item of encoder.event(candidate)) text += form.item(item)
                return text
              },
              end: Effect.sync(() => form.item(encoder.end()) + form.close),
              error: form.error
            })
            yield* writePulled(ctx.response, 200, headers, body)
            return Reply.written
          }
          let usage = emptyUsage
          const perCandidate = runs.map((run, index) => {
            const encoder = makeCandidateEncoder(meta, index)
            const events = candidateEvents(decoded)
            return run.events.pipe(
              Stream.mapConcat((event) => events(event).flatMap(encoder.event)),
              Stream.concat(
                Stream.sync(() => {
                  usage = addUsage(usage, encoder.usage())
                  return encoder.end()
                })
              )
            )
          })
          const items: Stream.Stream<StreamItem, GatewayError> = Stream.mergeAll(perCandidate, { concurrency: "unbounded" }).pipe(
            Stream.concat(Stream.sync(() => usageChunk(meta, usage)))
          )
          const body = Stream.make(form.open).pipe(
            Stream.concat(Stream.map(items, form.item)),
            Stream.concat(Stream.sync(() => form.close)),
            Stream.catchAll((error) => Stream.make(form.error(error)))
          )
          yield* writeStream(ctx.response, 200, headers, body)
          return Reply.written
        })
      )
    })

  /** An estimate of the input the request would send, with the refusals a real request gets. */
  const countTokens = (ctx: RequestContext, model: string) =>
    Effect.gen(function* () {
      const body = yield* bodyObject(yield* ctx.json)
      const wire = yield* decodeCount(body, "")
      const inner = wire.generateContentRequest
      const decoded = inner !== undefined && inner !== null ? yield* decode(inner, ctx, false) : yield* decode(body, ctx, false)
      // the model must exist and be allowed for this app, as for a real request
      yield* catalog.resolve(model, ctx.app)
      const request = withRespondTool({ ...decoded.request, system: catalog.system(model, ctx.app, decoded.request.system) })
      const offered = request.toolChoice.type === "none" ? { ...request, tools: [] } : request
      return Reply.json({ totalTokens: estimateTokens(offered, geminiCalibration) })
    })

  const unsupported = (ctx: RequestContext) =>
    Effect.fail(Errors.notFound("not_found", `Method ${ctx.params.method} is not supported; models take generateContent, streamGenerateContent and countTokens`))

  /** `POST /v1beta/models/{model}:<method>` for one method, or (no method given) for any other. */
  const actionPath = (method?: string) => (path: string) => {
    const parsed = parseModelAction(path)
    if (parsed === undefined) return undefined
    if (method === undefined ? isModelMethod(parsed.method) : parsed.method !== method) return undefined
    return parsed
  }

  const listModels = (ctx: RequestContext) => Effect.succeed(Reply.json({ models: catalog.list(ctx.app).map(modelEntry) }))

  const getModel = (ctx: RequestContext) =>
    Effect.gen(function* () {
      const id = ctx.params.model
      const listed = catalog.list(ctx.app).find((e) => e.id === id)
      if (listed !== undefined) return Reply.json(modelEntry(listed))
      // a `<provider>/<model>` id the catalog resolves without listing it
      const resolved = yield* catalog.resolve(id, ctx.app).pipe(Effect.mapError(() => Errors.notFound("not_found", `Model models/${id} was not found`)))
      const limit = resolved.targets[0]?.modelConfig?.contextLimit
      return Reply.json(modelEntry({ id, ownedBy: resolved.targets[0]?.provider ?? "gateway", ...(limit !== undefined ? { contextLimit: limit } : {}) }))
    })

  const routes: ReadonlyArray<Route> = [
    { method: "POST", path: actionPath("generateContent"), template: "/v1beta/models/{model}:generateContent", auth: "key", handler: (ctx) => generate(ctx, ctx.params.model), label: "gemini.generate_content" },
    { method: "POST", path: actionPath("streamGenerateContent"), template: "/v1beta/models/{model}:streamGenerateContent", auth: "key", handler: (ctx) => streamGenerate(ctx, ctx.params.model), label: "gemini.stream_generate_content" },
    { method: "POST", path: actionPath("countTokens"), template: "/v1beta/models/{model}:countTokens", auth: "key", handler: (ctx) => countTokens(ctx, ctx.params.model), label: "gemini.count_tokens" },
    // embedContent, batchEmbedContents and any other method: 404 NOT_FOUND
    { method: "POST", path: actionPath(), template: "/v1beta/models/{model}:{method}", auth: "key", handler: unsupported, label: "gemini.unsupported_method" },
    { method: "GET", path: "/v1beta/models", auth: "key", handler: listModels, label: "gemini.models.list" },
    {
      method: "GET",
      path: (path) => {
        const model = parseModelName(path)
        return model === undefined ? undefined : { model }
      },
      template: "/v1beta/models/{model}",
      auth: "key",
      handler: getModel,
      label: "gemini.models.get"
    }
  ]
  return routes
})
