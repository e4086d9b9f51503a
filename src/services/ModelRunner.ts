import { Chunk, Context, Effect, Layer, Option, Scope, Stream } from "effect"
import { Settings } from "../Config.js"
import { emptyUsage, samplingParamNames, type CanonicalRequest, type ModelEvent, type Sampling, type Usage } from "../domain/Canonical.js"
import { Errors, toGatewayError, type GatewayError, UpstreamError } from "../domain/Errors.js"
import { Ids } from "../domain/Ids.js"
import { Catalog, type AppSettings, type ResolveOptions } from "./Catalog.js"
import { Limits } from "./Limits.js"
import { ProviderClient, type ProviderTarget } from "./ProviderClient.js"
import { tracingEnabled } from "../Telemetry.js"
import { Metrics } from "./Metrics.js"
import { UsageLog, type Caller } from "./Usage.js"

/** The next events of a run, one chunk per pull; `Option.none()` after the last. */
export type EventPull = Effect.Effect<Chunk.Chunk<ModelEvent>, Option.Option<GatewayError>>

/** A model call that has produced its first event: nothing has been sent to the client yet. */
export interface StartedRun {
  readonly target: ProviderTarget
  readonly sessionId: string
  /** sampling params left out because the model does not take them */
  readonly droppedParams: ReadonlyArray<string>
  /**
   * every event, the first included, failing with the protocol-neutral GatewayError. A single
   * answer written as it comes is read with `pull` (no stream stages between the provider and the
   * socket); `events` is the same as a Stream, for merging and folding. Read one of them, once.
   */
  readonly pull: EventPull
  readonly events: Stream.Stream<ModelEvent, GatewayError>
}

/** A started run whose events are these, in one chunk (an answer held back and replayed). */
export const replayed = (run: StartedRun, events: ReadonlyArray<ModelEvent>): StartedRun => {
  let left: Chunk.Chunk<ModelEvent> | undefined = Chunk.unsafeFromArray([...events])
  const pull: EventPull = Effect.suspend(() => {
    if (left === undefined) return Effect.fail(Option.none())
    const chunk = left
    left = undefined
    return Effect.succeed(chunk)
  })
  return { ...run, pull, events: Stream.fromIterable(events) }
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
            const { dropped, request } = dropUnsupported(options.request, rejects, config.dropUnsupportedParams, providers.refusedParams(target, options.request))
            // an absolute deadline for the whole call, output included
            const call = { target, request, deadline: options.deadline }
            const direct = !tracing && providers.enforcesDeadline(target.provider)
            // a provider that ends its own streams at the deadline is pulled directly; otherwise its
            // stream gets a timer (and a span when tracing)
            const pull = direct
              ? yield* providers.open(call)
              : yield* Stream.toPull(
                  (tracing ? Stream.withSpan(providers.stream(call), "provider.stream", { kind: "client", attributes: spanAttributes(target) }) : providers.stream(call)).pipe(
                    (upstream) =>
                      providers.enforcesDeadline(target.provider)
                        ? upstream
                        : Stream.interruptWhen(upstream, Effect.sleep(Math.max(1, options.deadline - Date.now())).pipe(Effect.zipRight(Effect.failSync(timeout))))
                  )
                )
            // pull up to the first non-empty chunk: failing here may still fall back to the next target
            const attempt = yield* firstChunk(pull).pipe(Effect.either)
            if (attempt._tag === "Right") {
              const sessionId = Ids.session()
              const tracked = yield* trackedPull(given, clock, target, sessionId, attempt.right, pull)
              return { target, sessionId, droppedParams: dropped, pull: tracked, events: Stream.repeatEffectChunkOption(tracked) }
            }
            const error = attempt.left
            if (error._tag === "GatewayError") return yield* error
            if (!error.retryable) return yield* toGatewayError(error)
            lastError = error
          }
          return yield* toGatewayError(lastError ?? new UpstreamError({ reason: "unavailable", provider: "none", message: "no target" }))
        }).pipe(Effect.tapError((error) => Effect.sync(() => record(given, clock, { status: error.code, ...(tried !== undefined ? { target: tried } : {}) }))))
      }

      /**
       * A started run's pull: the first chunk, then the provider's, errors as GatewayErrors; its usage
       * is recorded when it ends or fails, or as cancelled when the scope closes before that.
       */
      const trackedPull = (
        options: RunOptions,
        clock: { readonly at: number; readonly t0: number },
        target: ProviderTarget,
        sessionId: string,
        first: Chunk.Chunk<ModelEvent>,
        pull: Effect.Effect<Chunk.Chunk<ModelEvent>, Option.Option<UpstreamError | GatewayError>>
      ): Effect.Effect<EventPull, never, Scope.Scope> => {
        const ttftMs = Math.round((performance.now() - clock.t0) * 100) / 100
        let usage: Usage | undefined
        let done = false
        const finish = (status: string) => {
          if (done) return
          done = true
          record(options, clock, { target, sessionId, status, ttftMs, ...(usage !== undefined ? { usage } : {}) })
        }
        const seen = (chunk: Chunk.Chunk<ModelEvent>) => {
          for (const event of chunk) if (event._tag === "Usage") usage = event.usage
          return chunk
        }
        const next: EventPull = Effect.mapBoth(pull, {
          onSuccess: seen,
          onFailure: (failure) => {
            if (Option.isNone(failure)) {
              finish("ok")
              return Option.none()
            }
            const error = toGatewayError(failure.value)
            finish(error.code)
            return Option.some(error)
          }
        })
        let waiting: Chunk.Chunk<ModelEvent> | undefined = first
        const tracked: EventPull = Effect.suspend(() => {
          if (waiting === undefined) return next
          const chunk = waiting
          waiting = undefined
          return Effect.succeed(seen(chunk))
        })
        return Effect.flatMap(Effect.scope, (scope) => Effect.as(Scope.addFinalizer(scope, Effect.sync(() => finish("cancelled"))), tracked))
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
                const { dropped, request } = dropUnsupported(options.request, rejects, config.dropUnsupportedParams, providers.refusedParams(target, options.request))
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
