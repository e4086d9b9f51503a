import { Context, Effect, Layer } from "effect"
import type { GatewayConfig } from "../../Config.js"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import { Catalog } from "../routing/Catalog.js"
import { KeyStore } from "../keys/KeyStore.js"

/** A reservation of body bytes; release it when the body has been used. */
export interface BodyReservation {
  /** grow the reservation (chunked bodies); fails when the budget cannot hold it */
  readonly grow: (bytes: number) => GatewayError | undefined
  readonly release: () => void
}

/**
 * Budgets and caps shared by every request: the model-request concurrency cap and the in-flight
 * body byte budget with a per-app share (an app may use the whole budget less one largest body for
 * every other app, so that each app can always read one body).
 */
export class Limits extends Context.Tag("gateway/Limits")<
  Limits,
  {
    /** take a model-request slot, or fail 429; give it back with `releaseModelSlot` */
    readonly takeModelSlot: Effect.Effect<void, GatewayError>
    readonly releaseModelSlot: () => void
    /** reserve body bytes for an app, or fail `server_busy` */
    readonly reserveBody: (app: string, bytes: number) => Effect.Effect<BodyReservation, GatewayError>
    readonly inFlight: () => { readonly modelRequests: number; readonly bodyBytes: number }
  }
>() {
  static readonly make = (config: GatewayConfig, appMaxBody: (app: string) => number, apps: () => ReadonlyArray<string>) => {
    let modelRequests = 0
    let bodyBytes = 0
    const perApp = new Map<string, number>()
    const budget = config.limits.maxBodyBytesInFlight

    const busy = (why: string) => Errors.unavailable("server_busy", `The gateway is reading too many request bodies at once (${why}); retry shortly`, { retryAfter: 1 })

    const appShare = (app: string): number => {
      let others = 0
      for (const other of apps()) if (other !== app) others += appMaxBody(other)
      return Math.max(budget - others, appMaxBody(app))
    }

    const takeSlot = Effect.suspend(() => {
      if (modelRequests >= config.concurrency) {
        return Effect.fail(Errors.rateLimited("too_many_requests", "Too many model requests in flight; retry shortly", { retryAfter: 1 }))
      }
      modelRequests++
      return Effect.void
    })
    const releaseSlot = () => void modelRequests--

    const reserveBody = (app: string, bytes: number) =>
      Effect.suspend(() => {
        let held = 0
        let released = false
        const take = (n: number): GatewayError | undefined => {
          const appHeld = perApp.get(app) ?? 0
          if (bodyBytes + n > budget) return busy("total budget")
          if (appHeld + n > appShare(app)) return busy("app share")
          bodyBytes += n
          perApp.set(app, appHeld + n)
          held += n
          return undefined
        }
        const error = take(bytes)
        if (error !== undefined) return Effect.fail(error)
        const reservation: BodyReservation = {
          grow: (n) => (released ? undefined : take(n)),
          release: () => {
            if (released) return
            released = true
            bodyBytes -= held
            perApp.set(app, (perApp.get(app) ?? held) - held)
          }
        }
        return Effect.succeed(reservation)
      })

    return Limits.of({ takeModelSlot: takeSlot, releaseModelSlot: releaseSlot, reserveBody, inFlight: () => ({ modelRequests, bodyBytes }) })
  }

  static readonly layer = (config: GatewayConfig) =>
    Layer.effect(
      Limits,
      Effect.gen(function* () {
        const catalog = yield* Catalog
        const keys = yield* KeyStore
        return Limits.make(config, (app) => catalog.app(app).maxBodyBytes, keys.apps)
      })
    )
}
