import { Quota } from "../../../src/services/quota/Quota.js"
import { Health } from "../../../src/services/routing/Health.js"
import { Router } from "../../../src/services/routing/Router.js"
import { Log } from "../../../src/services/ops/Log.js"
import { Context, Effect, Layer, Ref, Stream } from "effect"
import { Settings, type GatewayConfig } from "../../../src/Config.js"
import type { ModelEvent } from "../../../src/domain/Canonical.js"
import type { UpstreamError } from "../../../src/domain/Errors.js"
import { Catalog } from "../../../src/services/routing/Catalog.js"
import { KeyStore } from "../../../src/services/keys/KeyStore.js"
import { Limits } from "../../../src/services/runner/Limits.js"
import { Metrics } from "../../../src/services/ops/Metrics.js"
import { UsageLog } from "../../../src/services/usage/Usage.js"
import { ModelRunner } from "../../../src/services/runner/ModelRunner.js"
import { ProviderClient, type ProviderCall } from "../../../src/services/runner/ProviderClient.js"

/** Every call the provider double received, in order. */
export class CallLog extends Context.Tag("test/CallLog")<CallLog, Ref.Ref<ReadonlyArray<ProviderCall>>>() {}

/** The answer for a call, or undefined when the test did not script it. */
export type Script = (call: ProviderCall) => Stream.Stream<ModelEvent, UpstreamError> | undefined

/**
 * A `ProviderClient.layerTest` double that answers from a script, records each call, and dies
 * on any call the script does not cover, so an unexpected upstream call fails the test loudly.
 */
export const scriptedProviders = (script: Script): Layer.Layer<ProviderClient | CallLog> =>
  Layer.unwrapEffect(
    Effect.map(CallLog, (log) =>
      ProviderClient.layerTest((call) =>
        Stream.unwrap(
          Effect.gen(function* () {
            yield* Ref.update(log, (calls) => [...calls, call])
            const answer = script(call)
            if (answer === undefined) return yield* Effect.dieMessage(`provider double: no script for ${call.target.id}`)
            return answer
          })
        )
      )
    )
  ).pipe(Layer.provideMerge(Layer.effect(CallLog, Ref.make<ReadonlyArray<ProviderCall>>([]))))

/** The calls recorded since the last take, as target ids; clears the log. */
export const takeCalls = Effect.flatMap(CallLog, (log) => Ref.getAndSet(log, []))

/**
 * The services ModelRunner needs, composed as `servicesLayer` in src/App.ts composes them, minus
 * the database and the access log, with the given provider double.
 */
export const runnerLayer = <P>(config: GatewayConfig, providers: Layer.Layer<ProviderClient | P>) => {
  const base = Layer.mergeAll(Layer.succeed(Settings, config), KeyStore.layer(config), Catalog.layer(config))
  const limits = Limits.layer(config).pipe(Layer.provide(base))
  const quota = Quota.layerInMemory.pipe(Layer.provide(Layer.merge(base, Log.layer(false))))
  const runner = ModelRunner.layer.pipe(Layer.provide(Layer.mergeAll(base, limits, providers, UsageLog.disabled, Metrics.layer, quota, Health.layer, Router.layer.pipe(Layer.provide(Health.layer)))))
  return Layer.mergeAll(base, limits, providers, runner, quota)
}
