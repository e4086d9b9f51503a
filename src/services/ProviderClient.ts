import { Chunk, Context, Effect, Layer, Option, Scope, Stream } from "effect"
import type { ModelConfig, ProviderConfig, ProviderType } from "../Config.js"
import type { CanonicalRequest, ModelEvent } from "../domain/Canonical.js"
import { UpstreamError } from "../domain/Errors.js"

/** One resolved model to call: a configured provider and the model name sent upstream. */
export interface ProviderTarget {
  /** key of `providers` in the config */
  readonly provider: string
  readonly providerType: ProviderType
  /** model name passed upstream as written */
  readonly model: string
  /** `<provider>/<model>` */
  readonly id: string
  readonly variant?: string
  /** reasoning effort sent upstream (from the variant) */
  readonly reasoningEffort?: string
  /** extra upstream request fields (from the variant) */
  readonly params?: { readonly [key: string]: unknown }
  readonly modelConfig?: ModelConfig
}

/** One call of a model: the target and the request as it should reach the provider. */
export interface ProviderCall {
  readonly target: ProviderTarget
  readonly request: CanonicalRequest
  /** epoch ms by which the call must be finished; a provider's `complete` fails `timeout` past it */
  readonly deadline: number
}

/**
 * A streamed answer read pull by pull (`Option.none()` after the last events); `close` ends the
 * exchange, whether or not it was read to its end.
 */
export interface AnswerSource {
  readonly pull: Effect.Effect<Chunk.Chunk<ModelEvent>, Option.Option<UpstreamError>>
  readonly close: Effect.Effect<void>
}

/** A source as a Stream (closed when the stream ends, fails or is interrupted). */
export const sourceStream = (source: AnswerSource): Stream.Stream<ModelEvent, UpstreamError> =>
  Stream.repeatEffectChunkOption(source.pull).pipe(Stream.ensuring(source.close))

/**
 * A configured provider instance. `stream` yields events as they arrive; `complete` yields the
 * same events at once for a caller that does not stream (it skips the per-event stream machinery,
 * which costs far more than the work itself on a short answer). Both fail only with `UpstreamError`.
 */
export interface Provider {
  readonly stream: (call: ProviderCall) => Stream.Stream<ModelEvent, UpstreamError>
  readonly complete: (call: ProviderCall) => Effect.Effect<ReadonlyArray<ModelEvent>, UpstreamError>
  /**
   * true when `stream` itself fails with `timeout` at the call's deadline (the HTTP providers' abort
   * timer covers the whole exchange), so the runner adds no timer of its own: a timer fiber per
   * stream measured at a third of the streaming throughput
   */
  readonly enforcesDeadline?: boolean
  /**
   * the streamed answer without Stream machinery (same events as `stream`), for the runner's pull:
   * a channel executor per call measured as a fifth of a streamed answer's cost
   */
  readonly source?: (call: ProviderCall) => AnswerSource
}

/** `complete` as the collected `stream` within the deadline, for providers with no cheaper whole-answer call. */
export const completeFromStream = (stream: Provider["stream"]): Provider["complete"] => (call) =>
  Stream.runCollect(stream(call)).pipe(
    Effect.map((chunk) => Chunk.toReadonlyArray(chunk)),
    Effect.timeoutFail({
      duration: Math.max(1, call.deadline - Date.now()),
      onTimeout: () => new UpstreamError({ reason: "timeout", provider: call.target.provider, message: "no answer in time" })
    })
  )

/** Builds a provider instance of one type from its config entry. */
export interface ProviderFactory {
  readonly type: ProviderType
  readonly make: (name: string, config: ProviderConfig) => Effect.Effect<Provider>
  /**
   * Sampling params (wire names) this type's upstream would refuse for this request: those the
   * type never sends, and those refused for this request's settings. Always dropped and listed.
   */
  readonly refusedParams: (target: ProviderTarget, request: CanonicalRequest) => ReadonlyArray<string>
}

/** Registry of provider factories by type; each provider Layer adds one. */
export class ProviderFactories extends Context.Tag("gateway/ProviderFactories")<
  ProviderFactories,
  ReadonlyMap<ProviderType, ProviderFactory>
>() {}

/** Calls the configured providers. */
export class ProviderClient extends Context.Tag("gateway/ProviderClient")<
  ProviderClient,
  {
    readonly stream: (call: ProviderCall) => Stream.Stream<ModelEvent, UpstreamError>
    readonly complete: (call: ProviderCall) => Effect.Effect<ReadonlyArray<ModelEvent>, UpstreamError>
    /** whether a configured provider's streams fail by themselves at the deadline (see Provider) */
    readonly enforcesDeadline: (provider: string) => boolean
    /** the call's events pull by pull, the exchange closed with the scope */
    readonly open: (call: ProviderCall) => Effect.Effect<AnswerSource["pull"], never, Scope.Scope>
    /** sampling params the target's provider type would refuse for this request (see ProviderFactory) */
    readonly refusedParams: (target: ProviderTarget, request: CanonicalRequest) => ReadonlyArray<string>
  }
>() {
  /** Build one instance per configured provider, with the factories in context. */
  static readonly make = (providers: Readonly<Record<string, ProviderConfig>>) =>
    Effect.gen(function* () {
      const factories = yield* ProviderFactories
      const instances = new Map<string, Provider>()
      for (const [name, config] of Object.entries(providers)) {
        const factory = factories.get(config.type)
        if (factory === undefined) return yield* Effect.dieMessage(`no provider factory for type ${config.type}`)
        instances.set(name, yield* factory.make(name, config))
      }
      const missing = (call: ProviderCall) => new UpstreamError({ reason: "bad_request", provider: call.target.provider, message: "provider not configured" })
      return ProviderClient.of({
        stream: (call) => {
          const instance = instances.get(call.target.provider)
          return instance === undefined ? Stream.fail(missing(call)) : instance.stream(call)
        },
        complete: (call) => {
          const instance = instances.get(call.target.provider)
          return instance === undefined ? Effect.fail(missing(call)) : instance.complete(call)
        },
        enforcesDeadline: (provider) => instances.get(provider)?.enforcesDeadline === true,
        refusedParams: (target, request) => factories.get(target.providerType)?.refusedParams(target, request) ?? noParams,
        open: (call) => {
          const instance = instances.get(call.target.provider)
          if (instance === undefined) return Effect.succeed(Effect.fail(Option.some(missing(call))))
          if (instance.source === undefined) return Stream.toPull(instance.stream(call))
          const source = instance.source(call)
          return Effect.flatMap(Effect.scope, (scope) => Effect.as(Scope.addFinalizer(scope, source.close), source.pull))
        }
      })
    })

  static readonly layer = (providers: Readonly<Record<string, ProviderConfig>>) =>
    Layer.effect(ProviderClient, ProviderClient.make(providers))

  /** A test double: every call answers with the given function's stream. */
  static readonly layerTest = (f: (call: ProviderCall) => Stream.Stream<ModelEvent, UpstreamError>) =>
    Layer.succeed(ProviderClient, ProviderClient.of({ stream: f, complete: completeFromStream(f), enforcesDeadline: () => false, open: (call) => Stream.toPull(f(call)), refusedParams: () => noParams }))
}

const noParams: ReadonlyArray<string> = []

/** Combine factory Layers into the registry. */
export const factoriesLayer = (factories: ReadonlyArray<ProviderFactory>) =>
  Layer.succeed(ProviderFactories, new Map(factories.map((f) => [f.type, f])))
