import { Context, Effect, Layer, type Option, Stream } from "effect"
import type { ProviderConfig } from "../../Config.js"
import type { CanonicalRequest, ModelEvent } from "../../domain/Canonical.js"
import { UpstreamError } from "../../domain/Errors.js"
import { ProviderFactories, streamSource, wholeSource, type AnswerSource, type Provider, type ProviderCall, type ProviderTarget } from "../../providers/Provider.js"

export type { AnswerSource, ProviderCall, ProviderTarget } from "../../providers/Provider.js"

/** Calls the configured providers: one instance per configured provider, looked up by name. */
export class ProviderClient extends Context.Tag("gateway/ProviderClient")<
  ProviderClient,
  {
    /** open a call on the target's provider (see Provider) */
    readonly open: (call: ProviderCall) => AnswerSource
    /** sampling params the target's provider type would refuse for this request (see ProviderFactory) */
    readonly refusedParams: (target: ProviderTarget, request: CanonicalRequest) => ReadonlyArray<string>
    /** the upstream's own input token count for the call (see Provider); none when its provider cannot count */
    readonly countTokens: (call: ProviderCall) => Effect.Effect<Option.Option<number>, UpstreamError>
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
        // one instance per key of `apiKeys`, each with its own credential
        const keys = config.apiKeys ?? []
        for (let i = 0; i < keys.length; i++) instances.set(`${name}#${i}`, yield* factory.make(name, { ...config, apiKey: keys[i] }))
      }
      const instanceOf = (target: ProviderTarget) => instances.get(target.keyIndex === undefined ? target.provider : `${target.provider}#${target.keyIndex}`)
      return ProviderClient.of({
        open: (call) => {
          const instance = instanceOf(call.target)
          return instance === undefined
            ? wholeSource(Effect.fail(new UpstreamError({ reason: "bad_request", provider: call.target.provider, message: "provider not configured" })))
            : instance.open(call)
        },
        refusedParams: (target, request) => factories.get(target.providerType)?.refusedParams(target, request) ?? noParams,
        countTokens: (call) => {
          const count = instanceOf(call.target)?.countTokens
          return count === undefined ? Effect.succeedNone : Effect.asSome(count(call))
        }
      })
    })

  static readonly layer = (providers: Readonly<Record<string, ProviderConfig>>) => Layer.effect(ProviderClient, ProviderClient.make(providers))

  /** A test double: every call answers with the given function's stream (within the call's deadline). */
  static readonly layerTest = (f: (call: ProviderCall) => Stream.Stream<ModelEvent, UpstreamError>) =>
    Layer.succeed(
      ProviderClient,
      ProviderClient.of({ open: (call) => streamSource(Stream.suspend(() => f(call)), call), refusedParams: () => noParams, countTokens: () => Effect.succeedNone })
    )
}

const noParams: ReadonlyArray<string> = []
