import { Context, Effect, Either, Exit, Layer, Scope } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { gatewayLayer } from "../../src/App.js"
import { GatewayServer } from "../../src/http/Server.js"
import { decodeConfig, type GatewayConfig } from "../../src/Config.js"
import type { ProviderClient } from "../../src/services/runner/ProviderClient.js"

/** A gateway running in this process on a free loopback port, with its own temporary data dir. */
export interface TestGateway {
  /** `http://127.0.0.1:PORT` */
  readonly url: string
  readonly port: number
  readonly config: GatewayConfig
  readonly dataDir: string
  readonly close: () => Promise<void>
}

/** Decode a config document the way the config file is decoded; throws the problems on failure. */
export const configOf = (document: Record<string, unknown>, env: Record<string, string | undefined> = {}): GatewayConfig => {
  const decoded = decodeConfig(document, env)
  if (Either.isLeft(decoded)) throw new Error(`bad test config:\n${decoded.left.problems.join("\n")}`)
  return decoded.right
}

/**
 * Start a gateway for a config document (listen address and dataDir are filled in: 127.0.0.1,
 * port 0, a fresh temporary directory, access log off unless asked for). With `dataDir` the
 * caller owns the directory and closing leaves it in place (restart tests).
 */
export const startGateway = async (
  document: Record<string, unknown>,
  options: {
    readonly providers?: Layer.Layer<ProviderClient>
    readonly env?: Record<string, string | undefined>
    readonly dataDir?: string
    /** the routing strategies' random source */
    readonly random?: () => number
    /** how long requests in flight may take after close begins (default 500 ms) */
    readonly shutdownGraceMs?: number
  } = {}
): Promise<TestGateway> => {
  const ownsDir = options.dataDir === undefined
  const dataDir = options.dataDir ?? fs.mkdtempSync(path.join(os.tmpdir(), "gw-test-"))
  const config = configOf(
    { accessLog: false, ...document, listen: { host: "127.0.0.1", port: 0, ...(document.listen as object | undefined) }, dataDir },
    options.env
  )
  const scope = Effect.runSync(Scope.make())
  const layer = gatewayLayer(config, {
    shutdownGraceMs: options.shutdownGraceMs ?? 500,
    ...(options.providers !== undefined ? { providers: options.providers } : {}),
    ...(options.random !== undefined ? { random: options.random } : {})
  })
  const context = await Effect.runPromise(Layer.buildWithScope(layer, scope))
  const address = Context.get(context, GatewayServer)
  let closed = false
  return {
    url: `http://127.0.0.1:${address.port}`,
    port: address.port,
    config,
    dataDir,
    close: async () => {
      if (closed) return
      closed = true
      await Effect.runPromise(Scope.close(scope, Exit.void))
      if (ownsDir) fs.rmSync(dataDir, { recursive: true, force: true })
    }
  }
}
