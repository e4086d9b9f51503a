import { Chunk, Clock, Context, Effect, Exit, Layer, Option, Scope, type Tracer } from "effect"
import { Settings } from "../../Config.js"
import { emptyUsage, samplingParamNames, type CanonicalRequest, type ModelEvent, type Sampling, type Usage } from "../../domain/Canonical.js"
import { Errors, toGatewayError, type GatewayError, UpstreamError } from "../../domain/Errors.js"
import { Ids } from "../../domain/Ids.js"
import { drainPull, type AnswerSource, type Pull } from "../../providers/Provider.js"
import { tracingEnabled } from "../../Telemetry.js"
import { Catalog, type AppSettings, type ResolveOptions } from "../routing/Catalog.js"
import { Limits } from "./Limits.js"
import { Metrics } from "../ops/Metrics.js"
import { costOf, priceOf } from "../../domain/Cost.js"
import { ProviderClient, type ProviderTarget } from "./ProviderClient.js"
import { UsageLog, type Caller } from "../usage/Usage.js"
import { DEFAULT_OUTPUT_CAP, Quota, type Reservation } from "../quota/Quota.js"
import { Health } from "../routing/Health.js"
import { Router, type Plan } from "../routing/Router.js"
import type { RateLimitView } from "../../domain/Quota.js"
import { estimateTokens, geminiCalibration, messagesCalibration } from "../../domain/TokenEstimate.js"

/** The next events of a run, one chunk per pull; `Option.none()` after the last. */
export type EventPull = Pull<GatewayError>

/** A model call that has produced its first event: nothing has been sent to the client yet. */
export interface StartedRun {
  readonly target: ProviderTarget
  readonly sessionId: string
  /** sampling params left out because the model does not take them */
  readonly droppedParams: ReadonlyArray<string>
  /**
   * every event, the first included, failing with the protocol-neutral GatewayError: read it to
   * the socket with no stream stages between (or as a Stream where runs are merged), once
   */
  readonly pull: EventPull
  /** the rate limits that bound the call, for the answer's headers */
  readonly rateLimit?: RateLimitView
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
  return { ...run, pull }
}

/** A whole model answer for a caller that does not stream: its events, in order. */
export interface CompletedRun {
  readonly target: ProviderTarget
  readonly sessionId: string
  readonly droppedParams: ReadonlyArray<string>
  readonly events: ReadonlyArray<ModelEvent>
  readonly rateLimit?: RateLimitView
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
const firstChunk = <E>(pull: Pull<E>): Effect.Effect<Chunk.Chunk<ModelEvent>, E> =>
  Effect.matchEffect(pull, {
    onFailure: (e) => Option.match(e, { onNone: () => Effect.succeed(Chunk.empty<ModelEvent>()), onSome: (error) => Effect.fail(error) }),
    onSuccess: (chunk) => (Chunk.isEmpty(chunk) ? firstChunk(pull) : Effect.succeed(chunk))
  })

/** What a caller reads of an answer before anything reaches its client. */
type Read = (pull: Pull<UpstreamError>) => Effect.Effect<Chunk.Chunk<ModelEvent>, UpstreamError>

/** All of an answer, for a caller that does not stream. */
const readWhole: Read = (pull) => Effect.map(drainPull(pull), Chunk.unsafeFromArray)

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
 * One model call from the runner's side: the slot it holds, the provider exchange open now, and
 * its usage record. `release` ends all three, whenever the caller is done (or gone).
 */
interface Call {
  readonly options: RunOptions
  /** the request as the caller sent it (before the app's policy joins its system prompt): what a conversation is recognised by */
  readonly opening: CanonicalRequest
  readonly at: number
  readonly t0: number
  slot: boolean
  source: AnswerSource | undefined
  span: Tracer.Span | undefined
  /** the last target tried, so that a failure before any output is counted against its provider */
  target: ProviderTarget | undefined
  /** sampling params left out for that target */
  dropped: ReadonlyArray<string>
  sessionId: string | undefined
  ttftMs: number | undefined
  usage: Usage | undefined
  recorded: boolean
  /** what the call holds of its app's and key's limits until it is recorded */
  reservation: Reservation | undefined
  /** the targets in the order to try them */
  plan: Plan | undefined
  /** the target that answered, in flight until the call is released, and when its attempt began */
  answering: ProviderTarget | undefined
  attemptT0: number
}

/**
 * Runs a canonical request against a model id: resolves aliases, takes a concurrency slot, drops
 * unsupported params, and falls back to the next alias target when a retryable failure happens
 * before the first event. Fails before any output as a GatewayError. One path serves both
 * callers: `start` hands the events on as they come, `complete` folds the same events whole.
 */
export class ModelRunner extends Context.Tag("gateway/ModelRunner")<
  ModelRunner,
  {
    /** the run once its first events exist; the call is released when the scope closes */
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
      const quota = yield* Quota
      const health = yield* Health
      const router = yield* Router
      const tracing = tracingEnabled(config)

      /** The usage record and metrics of a finished, failed or cancelled call: once. */
      const record = (call: Call, status: string) => {
        if (call.recorded) return
        call.recorded = true
        const { options, target } = call
        const caller = options.caller
        const usage = call.usage ?? emptyUsage
        const costUsd = costOf(priceOf(config.providers, target), usage)
        if (call.reservation !== undefined) quota.settle(call.reservation, { tokens: usage.inputTokens + usage.outputTokens, usd: costUsd })
        if (caller === undefined) return
        const latencyMs = Math.round((performance.now() - call.t0) * 100) / 100
        metrics.modelCall({
          family: caller.protocol,
          route: caller.route,
          // a requested name that resolved to nothing is not a label: any string could be one
          model: target?.id ?? "unresolved",
          provider: target?.provider ?? "",
          status,
          tokens: { input: usage.inputTokens, output: usage.outputTokens, cacheRead: usage.cacheReadTokens, cacheWrite: usage.cacheWriteTokens, reasoning: usage.reasoningTokens },
          latencyMs,
          app: options.app.name,
          costUsd,
          ...(call.ttftMs !== undefined ? { ttftMs: call.ttftMs } : {})
        })
        if (!usageLog.enabled) return
        usageLog.record({
          time: call.at,
          app: options.app.name,
          ...(caller.user !== undefined ? { user: caller.user } : options.request.user !== undefined ? { user: options.request.user } : {}),
          keyId: caller.keyId,
          protocol: caller.protocol,
          route: caller.route,
          requestedModel: options.model.slice(0, 200),
          ...(target !== undefined ? { model: target.id, provider: target.provider, ...(target.keyIndex !== undefined ? { keyIndex: target.keyIndex } : {}) } : {}),
          ...(call.sessionId !== undefined ? { sessionId: call.sessionId } : {}),
          status,
          usage,
          costUsd,
          latencyMs,
          ...(call.ttftMs !== undefined ? { ttftMs: call.ttftMs } : {})
        })
      }
      // built only when it happens: constructing an error validates its fields and captures a stack
      const timeout = () => Errors.timeout("timeout", `The request ran past ${config.requestTimeoutMs} ms`)
      const noTarget = () => new UpstreamError({ reason: "unavailable", provider: "none", message: "no target" })

      // the system prompt that reaches the model: app policy, agent prompt or skill content
      const withSystem = (options: RunOptions): RunOptions => {
        const system = catalog.system(options.model, options.app, options.request.system)
        return system === options.request.system ? options : { ...options, request: { ...options.request, system } }
      }

      const newCall = (given: RunOptions): Call => ({
        options: withSystem(given),
        opening: given.request,
        at: Date.now(),
        t0: performance.now(),
        slot: false,
        source: undefined,
        span: undefined,
        target: undefined,
        dropped: [],
        sessionId: undefined,
        ttftMs: undefined,
        usage: undefined,
        recorded: false,
        reservation: undefined,
        plan: undefined,
        answering: undefined,
        attemptT0: 0
      })

      /** Close the exchange open now (and end its span). */
      const closeSource = (call: Call, exit: Exit.Exit<unknown, unknown>): Effect.Effect<void> => {
        const source = call.source
        const span = call.span
        call.source = undefined
        call.span = undefined
        if (span !== undefined) return Effect.zipRight(source?.close ?? Effect.void, Clock.clockWith((clock) => Effect.sync(() => span.end(clock.unsafeCurrentTimeNanos(), exit))))
        return source === undefined ? Effect.void : source.close
      }

      /** Everything a call holds, let go: the exchange, the slot, and a record if none was made. */
      const release = (call: Call): Effect.Effect<void> =>
        Effect.suspend(() => {
          if (call.slot) {
            call.slot = false
            limits.releaseModelSlot()
          }
          record(call, "cancelled")
          if (call.answering !== undefined) {
            health.done(call.answering, performance.now() - call.attemptT0)
            call.answering = undefined
          }
          return closeSource(call, Exit.void)
        })

      /** A span per provider exchange when tracing: `provider.stream` or `provider.complete`. */
      const spanFor = (call: Call, target: ProviderTarget): Effect.Effect<void> =>
        Effect.map(
          Effect.makeSpan(call.options.request.stream ? "provider.stream" : "provider.complete", {
            kind: "client",
            attributes: { "gateway.provider": target.provider, "gateway.model": target.id, "gateway.provider_type": target.providerType }
          }),
          (span) => void (call.span = span)
        )

      /**
       * The one fallback loop: each target in turn until one gives what the caller reads before any
       * output (`read`: the first events of a streamed answer, or all of a whole one).
       */
      const attempt = (
        call: Call,
        read: Read,
        targets: ReadonlyArray<ProviderTarget>,
        index: number,
        lastError: UpstreamError | undefined
      ): Effect.Effect<Chunk.Chunk<ModelEvent>, GatewayError> => {
        const target = targets[index]
        const { options } = call
        if (target === undefined) return Effect.fail(toGatewayError(lastError ?? noTarget()))
        // past the deadline no other target can answer in time
        if (index > 0 && Date.now() >= options.deadline) return Effect.fail(timeout())
        call.target = target
        const rejects = [...(config.providers[target.provider]?.rejects ?? []), ...(target.modelConfig?.rejects ?? [])]
        const { dropped, request } = dropUnsupported(options.request, rejects, config.dropUnsupportedParams, providers.refusedParams(target, options.request))
        const opened = Effect.suspend(() => {
          health.take(target)
          call.attemptT0 = performance.now()
          call.source = providers.open({ target, request, deadline: options.deadline })
          return Effect.onInterrupt(
            Effect.tap(read(call.source.pull), () => {
              call.answering = target
              health.succeeded(target, performance.now() - call.attemptT0)
              if (call.plan !== undefined) router.answered(call.plan, target)
            }),
            () => Effect.sync(() => health.released(target))
          )
        })
        const first = tracing ? Effect.zipRight(spanFor(call, target), opened) : opened
        call.dropped = dropped
        return Effect.catchAll(first, (error) =>
          Effect.zipRight(
            Effect.zipRight(health.failed(target, error), closeSource(call, Exit.fail(error))),
            error.retryable ? attempt(call, read, targets, index + 1, error) : Effect.fail(toGatewayError(error))
          )
        )
      }

      /** What a call may take, reserved before it runs: its input estimate and output cap, priced as its first target. */
      const estimate = (call: Call, first: ProviderTarget | undefined) => () => {
        const { request } = call.options
        const input = estimateTokens(request, first?.providerType === "gemini" ? geminiCalibration : messagesCalibration)
        const output = request.maxOutputTokens ?? DEFAULT_OUTPUT_CAP
        const usd = costOf(priceOf(config.providers, first), { ...emptyUsage, inputTokens: input, outputTokens: output }) ?? 0
        return { tokens: input + output, usd }
      }

      /** Admit the call against its app's and key's limits (a reservation held until it is recorded). */
      const admit = (call: Call, first: ProviderTarget | undefined): Effect.Effect<void, GatewayError> => {
        const { app, caller } = call.options
        const keyId = caller?.keyId ?? "none"
        if (!quota.applies(app.name, keyId)) return Effect.void
        return Effect.map(quota.admit(app.name, keyId, estimate(call, first)), (reservation) => void (call.reservation = reservation))
      }

      /** Resolve, take a slot, admit and open the first target that answers: what `read` read of it. */
      const open = (call: Call, read: Read): Effect.Effect<Chunk.Chunk<ModelEvent>, GatewayError> =>
        Effect.flatMap(catalog.resolve(call.options.model, call.options.app, call.options.resolve), (resolved) =>
          Effect.flatMap(limits.takeModelSlot, () => {
            call.slot = true
            return Effect.flatMap(admit(call, resolved.targets[0]), () => {
              if (call.options.deadline - Date.now() <= 0) return Effect.fail(timeout())
              // by the alias's strategy or the conversation; cooled targets last, the one whose cooldown ends first first
              return Effect.flatMap(router.plan(resolved, call.opening), (plan) => {
                call.plan = plan
                return attempt(call, read, plan.targets, 0, undefined)
              })
            })
          })
        ).pipe(Effect.tapError((error) => Effect.sync(() => record(call, error.code))))

      /**
       * The call's events from the first on, errors as GatewayErrors; the usage record is made when
       * they end or fail (or as cancelled when the call is released before that).
       */
      const tracked = (call: Call, first: Chunk.Chunk<ModelEvent>): EventPull => {
        call.ttftMs = Math.round((performance.now() - call.t0) * 100) / 100
        call.sessionId = Ids.session()
        const source = call.source as AnswerSource
        const seen = (chunk: Chunk.Chunk<ModelEvent>) => {
          for (const event of chunk) if (event._tag === "Usage") call.usage = event.usage
          return chunk
        }
        const next: EventPull = Effect.mapBoth(source.pull, {
          onSuccess: seen,
          onFailure: (failure) => {
            if (Option.isNone(failure)) {
              record(call, "ok")
              return Option.none()
            }
            const error = toGatewayError(failure.value)
            record(call, error.code)
            return Option.some(error)
          }
        })
        let waiting: Chunk.Chunk<ModelEvent> | undefined = first
        return Effect.suspend(() => {
          if (waiting === undefined) return next
          const chunk = waiting
          waiting = undefined
          return Effect.succeed(seen(chunk))
        })
      }

      /** The request as the mode asks for it: streamed from the upstream, or whole. */
      const inMode = (given: RunOptions, stream: boolean): RunOptions =>
        given.request.stream === stream ? given : { ...given, request: { ...given.request, stream } }

      const start = (given: RunOptions): Effect.Effect<StartedRun, GatewayError, Scope.Scope> =>
        Effect.flatMap(Effect.scope, (scope) => {
          const call = newCall(inMode(given, true))
          return Effect.zipRight(
            Scope.addFinalizer(scope, release(call)),
            Effect.map(open(call, firstChunk), (first): StartedRun => {
              const pull = tracked(call, first)
              const view = call.reservation?.view
              return { target: call.target as ProviderTarget, sessionId: call.sessionId as string, droppedParams: call.dropped, pull, ...(view !== undefined ? { rateLimit: view } : {}) }
            })
          )
        })

      // nothing is held before `open` takes the slot, so the call needs no acquire step of its own
      const complete = (given: RunOptions): Effect.Effect<CompletedRun, GatewayError> =>
        Effect.suspend(() => {
          const call = newCall(inMode(given, false))
          const answered = Effect.map(open(call, readWhole), (events): CompletedRun => {
            call.sessionId = Ids.session()
            for (const event of events) if (event._tag === "Usage") call.usage = event.usage
            record(call, "ok")
            const view = call.reservation?.view
            return {
              target: call.target as ProviderTarget,
              sessionId: call.sessionId,
              droppedParams: call.dropped,
              events: Chunk.toReadonlyArray(events),
              ...(view !== undefined ? { rateLimit: view } : {})
            }
          })
          return Effect.ensuring(answered, release(call))
        })

      return ModelRunner.of({ start, complete })
    })
  )
}
