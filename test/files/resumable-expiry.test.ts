/**
 * Unfinished Gemini-style resumable uploads expire after 10 minutes (spec 4.4), proved on
 * `makeResumable` directly with Effect's TestClock instead of waiting: the upload answers `query`
 * chunks until then; afterwards its id is unknown (404 with a key, 401 without), its staged
 * temporary file under `<dataDir>/files/` is gone, and it no longer counts towards the app's 4
 * unfinished uploads.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Option, TestClock } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Settings, type GatewayConfig } from "../../src/Config.js"
import type { GatewayError } from "../../src/domain/Errors.js"
import { Log } from "../../src/services/ops/Log.js"
import type { Reply, RequestContext } from "../../src/http/Route.js"
import { makeResumable } from "../../src/protocols/files/Resumable.js"
import { Catalog } from "../../src/services/routing/Catalog.js"
import { FileStore } from "../../src/services/files/FileStore.js"
import { KeyStore } from "../../src/services/keys/KeyStore.js"
import { sqliteLayer as databaseLayer } from "../../src/sql/Database.js"
import { configOf } from "../support/Gateway.js"

const MINUTE = 60 * 1000
const ORIGIN = "http://127.0.0.1:8080"
const UPLOAD_URL = /^http:\/\/127\.0\.0\.1:8080\/upload\/v1beta\/files\?upload_id=([0-9a-f]{32})&upload_protocol=resumable$/

const KEYS = { one: "sk-expiry-one-0123456789", two: "sk-expiry-two-0123456789" } as const
type App = keyof typeof KEYS

const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "resumable-expiry-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

const tempsIn = (dir: string): ReadonlyArray<string> => {
  const files = path.join(dir, "files")
  return fs.existsSync(files) ? fs.readdirSync(files).filter((name) => name.endsWith(".tmp")).sort() : []
}

/** Real time (not the TestClock): lets the expiry fiber's file deletion finish. */
const realPause = (ms: number) => Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, ms)))

/** Waits (in real time, up to 2 s) until `dir` holds `count` staged temporary files; returns them. */
const tempsSettleAt = (dir: string, count: number) =>
  Effect.gen(function* () {
    for (let i = 0; i < 100 && tempsIn(dir).length !== count; i++) yield* realPause(20)
    return tempsIn(dir)
  })

const layerOf = (config: GatewayConfig, dir: string) =>
  Layer.mergeAll(
    Layer.succeed(Settings, config),
    KeyStore.layer(config),
    Catalog.layer(config),
    FileStore.layer(dir).pipe(Layer.provideMerge(Layer.merge(databaseLayer(dir), Log.layerMemory([]))))
  )

/** A resumable uploader over a fresh data directory; the uploader, the store and the directory end with the test. */
const withResumable = <A, E>(
  body: (tools: {
    readonly dir: string
    readonly handle: (ctx: RequestContext) => Effect.Effect<Reply, unknown>
    readonly ctxOf: (options: { readonly app: App; readonly keyPresented: boolean; readonly headers: Record<string, string>; readonly query?: string }) => RequestContext
  }) => Effect.Effect<A, E>
) =>
  Effect.gen(function* () {
    const dir = yield* tempDir
    const config = configOf({
      accessLog: false,
      dataDir: dir,
      listen: { host: "127.0.0.1", port: 0 },
      providers: { mock: { type: "mock" } },
      keys: Object.entries(KEYS).map(([app, key]) => ({ key, app }))
    })
    return yield* Effect.gen(function* () {
      const resumable = yield* makeResumable
      const catalog = yield* Catalog
      const keys = yield* KeyStore
      const ctxOf = (options: { readonly app: App; readonly keyPresented: boolean; readonly headers: Record<string, string>; readonly query?: string }): RequestContext => {
        // a chunk with no key runs as nobody in particular, as the edge settles it
        const principal = options.keyPresented ? Option.getOrThrow(keys.authenticate(KEYS[options.app])) : { app: "default", keyId: "none", source: "none" as const }
        expect(principal.app).toBe(options.keyPresented ? options.app : "default")
        return {
          requestId: "req_test",
          route: "upload",
          family: "gemini",
          method: "POST",
          path: "/upload/v1beta/files",
          query: new URLSearchParams(options.query ?? ""),
          headers: options.headers,
          params: {},
          principal,
          keyPresented: options.keyPresented,
          app: catalog.app(principal.app),
          origin: ORIGIN,
          idHeaders: {},
          // no request here has a body: nothing may read these
          incoming: {} as RequestContext["incoming"],
          request: {} as RequestContext["request"],
          deadline: Number.MAX_SAFE_INTEGER,
          noteModel: () => undefined,
          noteUpgraded: () => undefined,
          json: Effect.succeed({})
        } as RequestContext
      }
      return yield* body({ dir, handle: resumable.handle as (ctx: RequestContext) => Effect.Effect<Reply, unknown>, ctxOf })
    }).pipe(Effect.scoped, Effect.provide(layerOf(config, dir)))
  })

type Tools = Parameters<Parameters<typeof withResumable>[0]>[0]

const startHeaders = {
  "x-goog-upload-protocol": "resumable",
  "x-goog-upload-command": "start",
  "x-goog-upload-header-content-length": "10",
  "x-goog-upload-header-content-type": "image/png"
}

/** Start an upload as `app` (with its key); the upload id from the `x-goog-upload-url` answer. */
const start = ({ handle, ctxOf }: Tools, app: App) =>
  Effect.gen(function* () {
    const reply = yield* handle(ctxOf({ app, keyPresented: true, headers: startHeaders }))
    expect(reply.status).toBe(200)
    expect(reply.headers["x-goog-upload-status"]).toBe("active")
    const match = UPLOAD_URL.exec(reply.headers["x-goog-upload-url"] ?? "")
    expect(match, `upload url ${reply.headers["x-goog-upload-url"]}`).not.toBeNull()
    return match![1]
  })

/** A `query` chunk (no body is read) to an upload, with the app's key or with none. */
const query = ({ handle, ctxOf }: Tools, app: App, id: string, keyPresented: boolean) =>
  handle(ctxOf({ app, keyPresented, headers: { "x-goog-upload-command": "query" }, query: `upload_id=${id}&upload_protocol=resumable` }))

const expectActive = (reply: Reply) => {
  expect(reply.status).toBe(200)
  expect(reply.headers["x-goog-upload-status"]).toBe("active")
  expect(reply.headers["x-goog-upload-size-received"]).toBe("0")
}

const failure = <A>(effect: Effect.Effect<A, unknown>) =>
  Effect.map(Effect.flip(effect), (error) => {
    expect((error as { _tag?: unknown })._tag).toBe("GatewayError")
    return error as GatewayError
  })

describe("resumable uploads expire after 10 minutes (TestClock)", () => {
  it.scoped("an unfinished upload answers until 10 minutes, then is 404 with a key, 401 without, and its temporary file is gone", () =>
    withResumable((tools) =>
      Effect.gen(function* () {
        const { dir } = tools
        const id = yield* start(tools, "one")
        expect(tempsIn(dir)).toHaveLength(1)

        expectActive(yield* query(tools, "one", id, true))
        expectActive(yield* query(tools, "one", id, false))

        yield* TestClock.adjust(9 * MINUTE)
        expectActive(yield* query(tools, "one", id, true))
        expectActive(yield* query(tools, "one", id, false))
        expect(tempsIn(dir)).toHaveLength(1)

        // the last millisecond of its 10 minutes
        yield* TestClock.adjust(MINUTE - 1)
        expectActive(yield* query(tools, "one", id, true))
        expect(tempsIn(dir)).toHaveLength(1)

        // 10 minutes and 1 second after the start; the minute timer alone removes the staged file
        yield* TestClock.adjust(1 + 1000)
        expect(yield* tempsSettleAt(dir, 0)).toEqual([])

        const withKey = yield* failure(query(tools, "one", id, true))
        expect(withKey.status).toBe(404)
        expect(withKey.kind).toBe("not_found")
        expect(withKey.code).toBe("not_found")

        const withoutKey = yield* failure(query(tools, "one", id, false))
        expect(withoutKey.status).toBe(401)
        expect(withoutKey.kind).toBe("authentication")

        expect(tempsIn(dir)).toEqual([])
      })
    )
  )

  it.scoped("an expired upload is dropped by the next request even before the minute timer runs", () =>
    withResumable((tools) =>
      Effect.gen(function* () {
        const { dir } = tools
        // started 30 s into a minute of the timer: the timer's next runs are at 10:00 and 11:00 of
        // the clock, the upload ends at 10:30
        yield* TestClock.adjust(30 * 1000)
        const id = yield* start(tools, "one")
        yield* TestClock.adjust(9 * MINUTE + 30 * 1000)
        // 9:30 after the start: still there
        expectActive(yield* query(tools, "one", id, true))
        yield* TestClock.setTime(30 * 1000 + 10 * MINUTE)
        // exactly 10:00 after the start (between two timer runs): the request's own sweep drops it
        const withKey = yield* failure(query(tools, "one", id, true))
        expect(withKey.status).toBe(404)
        expect(yield* tempsSettleAt(dir, 0)).toEqual([])
      })
    )
  )

  it.scoped("4 unfinished uploads of an app make the 5th start a 429; once they expire a start works again", () =>
    withResumable((tools) =>
      Effect.gen(function* () {
        const { dir } = tools
        const ids: Array<string> = []
        for (let i = 0; i < 4; i++) {
          ids.push(yield* start(tools, "one"))
          yield* TestClock.adjust(1000)
        }
        expect(new Set(ids).size).toBe(4)
        expect(tempsIn(dir)).toHaveLength(4)

        const fifth = yield* failure(tools.handle(tools.ctxOf({ app: "one", keyPresented: true, headers: startHeaders })))
        expect(fifth.status).toBe(429)
        expect(fifth.kind).toBe("rate_limited")
        expect(fifth.code).toBe("too_many_uploads")
        expect(fifth.retryAfter).toBe(60)
        expect(tempsIn(dir)).toHaveLength(4)

        // the cap is per app
        const other = yield* start(tools, "two")
        expect(tempsIn(dir)).toHaveLength(5)

        // 9 minutes on: all still unfinished, still capped
        yield* TestClock.adjust(9 * MINUTE)
        const stillCapped = yield* failure(tools.handle(tools.ctxOf({ app: "one", keyPresented: true, headers: startHeaders })))
        expect(stillCapped.status).toBe(429)
        for (const id of ids) expectActive(yield* query(tools, "one", id, true))

        // past 10 minutes for every one of them (10:05 of the clock: the minute timer ran at 10:00,
        // when only the first had ended; the first request sweeps the rest)
        yield* TestClock.adjust(MINUTE + 1000)
        for (const id of ids) expect((yield* failure(query(tools, "one", id, true))).status).toBe(404)
        expect((yield* failure(query(tools, "two", other, true))).status).toBe(404)
        expect(yield* tempsSettleAt(dir, 0)).toEqual([])

        const again = yield* start(tools, "one")
        expect(ids).not.toContain(again)
        expectActive(yield* query(tools, "one", again, true))
        expect(tempsIn(dir)).toHaveLength(1)
      })
    )
  )
})
