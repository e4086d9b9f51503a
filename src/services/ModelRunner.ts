import { Chunk, Context, Effect, Layer, Option, Scope, Stream } from "effect"
import { Settings } from "../Config.js"
import { emptyUsage, samplingParamNames, type CanonicalRequest, type ModelEvent, type Sampling, type Usage } from "../domain/Canonical.js"
import { Errors, toGatewayError, type GatewayError, UpstreamError } from "../domain/Errors.js"
import { Ids } from "../domain/Ids.js"
import { Catalog, type AppSettings, type ResolveOptions } from "./Catalog.js"
import { Limits } from "./Limits.js"
import { neverSent, ProviderClient, type ProviderTarget } from "./ProviderClient.js"
import { tracingEnabled } from "../Telemetry.js"
import { Metrics } from "./Metrics.js"
import { UsageLog, type Caller } from "./Usage.js"

/** A model call that has produced its first event: nothing has been sent to the client yet. */
export interface StartedRun {
  readonly target: ProviderTarget
  readonly sessionId: string
  /** sampling params left out because the model does not take them */
  readonly droppedParams: ReadonlyArray<string>
  /** every event, the first included; fails with the protocol-neutral GatewayError */
  readonly events: Stream.Stream<ModelEvent, GatewayError>
}

/** A whole model answer for a caller that does not stream: its events, in order. */
export interface CompletedRun {
  readonly target: ProviderTarget
  readonly sessionId: string
  readonly droppedParams: ReadonlyArray<string>
  readonly events: ReadonlyArray<ModelEvent>
}

export interface RunOptions {
  /** who calls, for the usage record (no record without it) */
  readonly caller?: Caller
  readonly model: string
  readonly request: CanonicalRequest
  readonly app: AppSettings
  /** epoch ms by which the call must be finished */
  readonly deadline: number
  readonly resolve?: ResolveOptions
}

/** The first non-empty chunk of a pull (empty at the end of the stream), failing with the stream's error. */
const firstChunk = <E>(pull: Effect.Effect<Chunk.Chunk<ModelEvent>, Option.Option<E>>): Effect.Effect<Chunk.Chunk<ModelEvent>, E> =>
  Effect.matchEffect(pull, {
    onFailure: (e) => Option.match(e, { onNone: () => Effect.succeed(Chunk.empty<ModelEvent>()), onSome: (error) => Effect.fail(error) }),
    onSuccess: (chunk) => (Chunk.isEmpty(chunk) ? firstChunk(pull) : Effect.succeed(chunk))
  })

/** Which sampling params to leave out for a target, and the request without them. */
export const dropUnsupported = (
  request: CanonicalRequest,
  rejects: ReadonlyArray<string>,
  enabled: boolean,
  never: ReadonlyArray<string> = []
): { readonly request: CanonicalRequest; readonly dropped: ReadonlyArray<string> } => {
  if (!enabled) rejects = never
  else if (never.length > 0) rejects = [...rejects, ...never]
  if (rejects.length === 0) return { request, dropped: [] }
  const dropped: Array<string> = []
  const sampling: Record<string, unknown> = { ...request.sampling }
  for (const [key, wire] of Object.entries(samplingParamNames)) {
    if (sampling[key] !== undefined && rejects.includes(wire)) {
      delete sampling[key]
      dropped.push(wire)
    }
  }
  return dropped.length === 0 ? { request, dropped } : { request: { ...request, sampling: sampling as Sampling }, dropped }
}

/**
 * Runs a canonical request against a model id: resolves aliases, takes a concurrency slot for the
 * scope's lifetime, drops unsupported params, and falls back to the next alias target when a
 * retryable failure happens before the first event. Fails before any output as a GatewayError.
 */
export class ModelRunner extends Context.Tag("gateway/ModelRunner")<
  ModelRunner,
  {
    readonly start: (options: RunOptions) => Effect.Effect<StartedRun, GatewayError, Scope.Scope>
    /** the whole answer at once (same targets, fallbacks and limits as `start`) */
    readonly complete: (options: RunOptions) => Effect.Effect<CompletedRun, GatewayError>
  }
>() {
  static readonly layer = Layer.effect(
    ModelRunner,
    Effect.gen(function* () {
      const config = yield* Settings
      const catalog = yield* Catalog
      const limits = yield* Limits
      const providers = yield* ProviderClient
      const usageLog = yield* UsageLog
      const metrics = yield* Metrics
      const tracing = tracingEnabled(config)
      const spanAttributes = (target: ProviderTarget) => ({ "gateway.provider": target.provider, "gateway.model": target.id, "gateway.provider_type": target.providerType })

      /** One usage record for a finished (or failed) call. */
      const record = (
        options: RunOptions,
        clock: { readonly at: number; readonly t0: number },
        outcome: { readonly target?: ProviderTarget; readonly sessionId?: string; readonly status: string; readonly usage?: Usage; readonly ttftMs?: number }
      ) => {
        const caller = options.caller
        if (caller === undefined) return
        const usage = outcome.usage ?? emptyUsage
        const latencyMs = Math.round((performance.now() - clock.t0) * 100) / 100
        metrics.modelCall({
          family: caller.protocol,
          route: caller.route,
          // a requested name that resolved to nothing is not a label: any string could be one
          model: outcome.target?.id ?? "unresolved",
          provider: outcome.target?.provider ?? "",
          status: outcome.status,
          tokens: { input: usage.inputTokens, output: usage.outputTokens, cacheRead: usage.cacheReadTokens, cacheWrite: usage.cacheWriteTokens, reasoning: usage.reasoningTokens },
          latencyMs,
          ...(outcome.ttftMs !== undefined ? { ttftMs: outcome.ttftMs } : {})
        })
        if (!usageLog.enabled) return
        usageLog.record({
          time: clock.at,
          app: options.app.name,
          ...(caller.user !== undefined ? { user: caller.user } : options.request.user !== undefined ? { user: options.request.user } : {}),
          keyId: caller.keyId,
          protocol: caller.protocol,
          route: caller.route,
          requestedModel: options.model.slice(0, 200),
          ...(outcome.target !== undefined ? { model: outcome.target.id, provider: outcome.target.provider } : {}),
          ...(outcome.sessionId !== undefined ? { sessionId: outcome.sessionId } : {}),
          status: outcome.status,
          usage,
          latencyMs,
          ...(outcome.ttftMs !== undefined ? { ttftMs: outcome.ttftMs } : {})
        })
      }
      // built only when it happens: constructing an error validates its fields and captures a stack
      const timeout = () => Errors.timeout("timeout", `The request ran past ${config.requestTimeoutMs} ms`)

      // the system prompt that reaches the model: app policy, agent prompt or skill content
      const withSystem = (options: RunOptions): RunOptions => {
        const system = catalog.system(options.model, options.app, options.request.system)
        return system === options.request.system ? options : { ...options, request: { ...options.request, system } }
      }

      const start = (given: RunOptions): Effect.Effect<StartedRun, GatewayError, Scope.Scope> => {
        const clock = { at: Date.now(), t0: performance.now() }
        // the last target tried, so that a failure before any output is counted against its provider
        let tried: ProviderTarget | undefined
        return Effect.gen(function* () {
          const options = withSystem(given)
          const resolved = yield* catalog.resolve(options.model, options.app, options.resolve)
          yield* limits.modelSlot
          const remaining = options.deadline - Date.now()
          if (remaining <= 0) return yield* timeout()
          let lastError: UpstreamError | undefined
          for (const target of resolved.targets) {
            tried = target
            const rejects = [...(config.providers[target.provider]?.rejects ?? []), ...(target.modelConfig?.rejects ?? [])]
            const { dropped, request } = dropUnsupported(options.request, rejects, config.dropUnsupportedParams, neverSent[target.providerType])
            // an absolute deadline for the whole call, output included
            const called = providers.stream({ target, request, deadline: options.deadline })
            const upstream = (tracing ? Stream.withSpan(called, "provider.stream", { kind: "client", attributes: spanAttributes(target) }) : called).pipe(
              Stream.interruptWhen(Effect.sleep(Math.max(1, options.deadline - Date.now())).pipe(Effect.zipRight(Effect.failSync(timeout))))
            )
            // pull up to the first non-empty chunk: failing here may still fall back to the next target
            const pull = yield* Stream.toPull(upstream)
            const attempt = yield* firstChunk(pull).pipe(Effect.either)
            if (attempt._tag === "Right") {
              const sessionId = Ids.session()
              const events = Stream.concat(Stream.fromChunk(attempt.right), Stream.repeatEffectChunkOption(pull)).pipe(
                Stream.mapError((e) => toGatewayError(e))
              )
              return { target, sessionId, droppedParams: dropped, events: tracked(given, clock, target, sessionId, events) }
            }
            const error = attempt.left
            if (error._tag === "GatewayError") return yield* error
            if (!error.retryable) return yield* toGatewayError(error)
            lastError = error
          }
          return yield* toGatewayError(lastError ?? new UpstreamError({ reason: "unavailable", provider: "none", message: "no target" }))
        }).pipe(Effect.tapError((error) => Effect.sync(() => record(given, clock, { status: error.code, ...(tried !== undefined ? { target: tried } : {}) }))))
      }

      /** A started run's events, recording its usage when the stream ends, fails or is cancelled. */
      const tracked = (
        options: RunOptions,
        clock: { readonly at: number; readonly t0: number },
        target: ProviderTarget,
        sessionId: string,
        events: Stream.Stream<ModelEvent, GatewayError>
      ): Stream.Stream<ModelEvent, GatewayError> => {
        if (options.caller === undefined) return events
        const ttftMs = Math.round((performance.now() - clock.t0) * 100) / 100
        let usage: Usage | undefined
        let status = "cancelled"
        return events.pipe(
          Stream.mapChunks((chunk) => {
            for (const event of chunk) if (event._tag === "Usage") usage = event.usage
            return chunk
          }),
          Stream.tapError((error) => Effect.sync(() => void (status = error.code))),
          Stream.concat(Stream.execute(Effect.sync(() => void (status = "ok")))),
          Stream.ensuring(Effect.sync(() => record(options, clock, { target, sessionId, status, ttftMs, ...(usage !== undefined ? { usage } : {}) })))
        )
      }

      // no Scope and no timer fiber here: the slot is held with acquireUseRelease and the provider
      // enforces the deadline itself (an AbortSignal timer on the upstream request)
      const complete = (given: RunOptions): Effect.Effect<CompletedRun, GatewayError> => {
        const options = withSystem(given)
        const clock = { at: Date.now(), t0: performance.now() }
        let tried: ProviderTarget | undefined
        const run = Effect.flatMap(catalog.resolve(options.model, options.app, options.resolve), (resolved) =>
          limits.withModelSlot(
            Effect.suspend(() => {
              if (options.deadline - Date.now() <= 0) return Effect.fail(timeout())
              const attempt = (index: number, lastError: UpstreamError | undefined): Effect.Effect<CompletedRun, GatewayError> => {
                const target = resolved.targets[index]
                if (target === undefined) {
                  return Effect.fail(toGatewayError(lastError ?? new UpstreamError({ reason: "unavailable", provider: "none", message: "no target" })))
                }
                tried = target
                const rejects = [...(config.providers[target.provider]?.rejects ?? []), ...(target.modelConfig?.rejects ?? [])]
                const { dropped, request } = dropUnsupported(options.request, rejects, config.dropUnsupportedParams, neverSent[target.providerType])
                const called = providers.complete({ target, request, deadline: options.deadline })
                return Effect.matchEffect(tracing ? Effect.withSpan(called, "provider.complete", { kind: "client", attributes: spanAttributes(target) }) : called, {
                  onSuccess: (events): Effect.Effect<CompletedRun, GatewayError> =>
                    Effect.succeed({ target, sessionId: Ids.session(), droppedParams: dropped, events }),
                  onFailure: (error: UpstreamError): Effect.Effect<CompletedRun, GatewayError> =>
                    error.retryable ? attempt(index + 1, error) : Effect.fail(toGatewayError(error))
                })
              }
              return attempt(0, undefined)
            })
          )
        )
        if (given.caller === undefined) return run
        return run.pipe(
          Effect.tapBoth({
            onFailure: (error) => Effect.sync(() => record(given, clock, { status: error.code, ...(tried !== undefined ? { target: tried } : {}) })),
            onSuccess: (done) =>
              Effect.sync(() => {
                let usage: Usage | undefined
                for (const event of done.events) if (event._tag === "Usage") usage = event.usage
                record(given, clock, { target: done.target, sessionId: done.sessionId, status: "ok", ...(usage !== undefined ? { usage } : {}) })
              })
          })
        )
      }

      return ModelRunner.of({ start, complete })
    })
  )
}
