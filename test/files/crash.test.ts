/**
 * A crash while uploads are in flight (spec 4.4 "Files ... survive restart", 2.4, 8): the gateway
 * runs as a real child process (`node dist/main.js`, built once), many uploads run at once, and
 * the process is killed with SIGKILL while some bodies are half-sent, some wait in their app's
 * save queue, some race the kill, and resumable uploads are unfinished. After a restart on the
 * same data dir: every acknowledged file is listed with identical bytes, nothing half-sent is
 * visible, nothing but listed files is left in `<dataDir>/files`, and the unfinished resumable
 * uploads are gone.
 */
import { afterAll, describe, expect, it } from "vitest"
import {
  call,
  formBody,
  jsonOf,
  KiB,
  MiB,
  open,
  pngBytes,
  relatedBody,
  sha256,
  sleep,
  storedNames,
  tempFiles,
  until,
  within,
  type MultipartBody,
  type OpenRequest
} from "./uploadWire.js"
import { childGateways } from "../support/ChildGateway.js"

const APPS = Array.from({ length: 10 }, (_, i) => `app${i}`)
const keyOf = (app: string) => `sk-crash-${app}-0123456789`

const gateways = childGateways()
const startChild = gateways.start
const requests = new Set<OpenRequest>()

afterAll(async () => {
  for (const request of requests) request.destroy()
  await gateways.cleanup()
})

/** What the test knows about one upload when the process dies. */
interface Sent {
  readonly app: string
  readonly label: string
  readonly data: Buffer
  /** the gateway's 200 was read: its id */
  id?: string
  /** every byte of the body was handed to the socket */
  whole: boolean
  /** it could not have been committed (waiting behind a save that never finished) */
  readonly neverCommitted?: boolean
}

const auth = (app: string) => ({ authorization: `Bearer ${keyOf(app)}` })

/** Start an upload: returns its record and request; `send` decides how much of the body goes. */
const begin = (port: number, app: string, label: string, data: Buffer, body: MultipartBody, target = "/v1/files", neverCommitted = false) => {
  const sent: Sent = { app, label, data, whole: false, ...(neverCommitted ? { neverCommitted } : {}) }
  const headers = target === "/v1/files" ? auth(app) : { "x-goog-api-key": keyOf(app) }
  const request = open(port, "POST", target, { ...headers, "content-type": body.contentType, "content-length": body.body.length })
  requests.add(request)
  void request.answer.then((answer) => {
    if (answer.status !== 200) return
    const json = jsonOf(answer)
    sent.id = typeof json.id === "string" ? json.id : `file-${String((json.file as { name: string }).name).replace(/^files\//, "")}`
  })
  return { sent, request }
}

/** Send the whole body in a few pieces, with short pauses so the uploads interleave. */
const sendWhole = async (request: OpenRequest, body: Buffer, sent: Sent, pieces = 4) => {
  const size = Math.ceil(body.length / pieces)
  let at = 0
  while (body.length - at > size) {
    await request.write(body.subarray(at, at + size))
    at += size
    await sleep(Math.floor(Math.random() * 4))
  }
  sent.whole = true
  await request.end(body.subarray(at))
}

const UPLOAD_URL = /\/upload\/v1beta\/files\?upload_id=[0-9a-f]{32}&upload_protocol=resumable$/

/** A resumable start; the upload URL's path and query. */
const startResumable = async (port: number, app: string, length: number) => {
  const answer = await call(
    port,
    "POST",
    "/upload/v1beta/files",
    {
      "x-goog-api-key": keyOf(app),
      "content-type": "application/json",
      "x-goog-upload-protocol": "resumable",
      "x-goog-upload-command": "start",
      "x-goog-upload-header-content-length": String(length),
      "x-goog-upload-header-content-type": "image/png"
    },
    JSON.stringify({ file: { displayName: `resumable ${app}` } })
  )
  expect(answer.status, answer.text).toBe(200)
  const url = String(answer.headers["x-goog-upload-url"])
  expect(url).toMatch(UPLOAD_URL)
  const parsed = new URL(url)
  return `${parsed.pathname}${parsed.search}`
}

describe("SIGKILL during uploads, then a restart on the same data dir", () => {
  it(
    "acknowledged files survive byte for byte; nothing half-sent is visible; no temporary files are left; unfinished resumable uploads are gone",
    async () => {
      const { cwd, dataDir, configFile } = gateways.workspace("gw-files-crash-", [
        "providers:",
        "  mock: { type: mock }",
        "keys:",
        ...APPS.map((app) => `  - { key: ${keyOf(app)}, app: ${app} }`)
      ])
      const first = await startChild(cwd, configFile)
      const port = first.port
      const all: Array<Sent> = []
      let killed = false

      // --- phase A: 30 uploads at once (3 per app), all sent whole and acknowledged -------------
      const phaseA = APPS.flatMap((app) =>
        [0, 1, 2].map(async (n) => {
          const data = pngBytes(1 * KiB + Math.floor(Math.random() * MiB))
          const body = formBody({ data, filename: `${app}-${n}.png` })
          const { request, sent } = begin(port, app, `A ${app}/${n}`, data, body)
          all.push(sent)
          await sendWhole(request, body.body, sent)
          const answer = await within(30_000, `phase A upload ${sent.label}`, request.answer)
          expect(answer.status, answer.text).toBe(200)
          return sent
        })
      )
      await Promise.all(phaseA)
      await until("every phase A id recorded", () => all.every((s) => s.id !== undefined), 5_000)
      const phaseAIds = all.map((s) => s.id)

      // --- phase B: in flight when the process dies ---------------------------------------------
      // apps 0-3: a save running with its body half-sent (app3's through uploadType=multipart)
      for (const app of APPS.slice(0, 4)) {
        const data = pngBytes(2 * MiB)
        const related = app === "app3"
        const body = related ? relatedBody({ file: { displayName: "held" } }, data) : formBody({ data, filename: `${app}-held.png` })
        const { request, sent } = begin(port, app, `B held ${app}`, data, body, related ? "/upload/v1beta/files?uploadType=multipart" : "/v1/files")
        all.push(sent)
        await request.write(body.body.subarray(0, body.head.length + 512 * KiB))
      }
      await until("the four half-sent saves to be writing", () => tempFiles(dataDir).length === 4)
      // apps 0-1: whole bodies waiting behind them; apps 2-3: half-sent bodies waiting
      for (const app of APPS.slice(0, 4)) {
        const data = pngBytes(64 * KiB)
        const body = formBody({ data, filename: `${app}-waiting.png` })
        const { request, sent } = begin(port, app, `B waiting ${app}`, data, body, "/v1/files", true)
        all.push(sent)
        if (app === "app0" || app === "app1") await sendWhole(request, body.body, sent, 2)
        else await request.write(body.body.subarray(0, body.head.length + 10 * KiB))
      }
      // apps 8-9: unfinished resumable uploads (app8 after one chunk; app9 in the middle of one)
      const resumable8 = await startResumable(port, "app8", 300 * KiB)
      const resumableData = pngBytes(300 * KiB)
      const chunk8 = await call(
        port,
        "POST",
        resumable8,
        { "x-goog-api-key": keyOf("app8"), "x-goog-upload-command": "upload", "x-goog-upload-offset": "0", "content-type": "application/json" },
        resumableData.subarray(0, 100 * KiB)
      )
      expect(chunk8.status, chunk8.text).toBe(200)
      expect(chunk8.headers["x-goog-upload-status"]).toBe("active")
      const resumable9 = await startResumable(port, "app9", 300 * KiB)
      const chunk9 = open(port, "POST", resumable9, {
        "x-goog-api-key": keyOf("app9"),
        "x-goog-upload-command": "upload, finalize",
        "x-goog-upload-offset": "0",
        "content-type": "application/json",
        "content-length": resumableData.length
      })
      requests.add(chunk9)
      await chunk9.write(resumableData.subarray(0, 150 * KiB))
      await until("the resumable uploads' temporary files", () => tempFiles(dataDir).length === 6)

      // apps 4-7 race the kill: app4 small (answered before it), app5 4 MiB at full speed (its body
      // sent whole just before it, the answer probably not), app6-7 8 MiB in paced pieces whose
      // last MiB is never sent (half-sent, being written, at the kill)
      const racers = [
        { app: "app4", size: 64 * KiB, pause: 0, keep: 0 },
        { app: "app5", size: 4 * MiB, pause: 0, keep: 0 },
        { app: "app6", size: 8 * MiB, pause: 5, keep: MiB },
        { app: "app7", size: 8 * MiB, pause: 5, keep: MiB }
      ].map(({ app, keep, pause, size }) => {
        const data = pngBytes(size)
        const body = formBody({ data, filename: `${app}-racer.png` })
        const { request, sent } = begin(port, app, `B racer ${app}`, data, body)
        all.push(sent)
        const last = body.body.length - keep
        void (async () => {
          for (let at = 0; at < last && !killed; at += 256 * KiB) {
            const to = Math.min(at + 256 * KiB, last)
            if (to === body.body.length) {
              sent.whole = true
              await request.end(body.body.subarray(at))
            } else await request.write(body.body.subarray(at, to))
            if (pause > 0) await sleep(pause)
          }
        })()
        return sent
      })
      // kill when app4 was answered, app5's body is sent whole and the paced ones are being written
      await until(
        "the racers to reach their places",
        () => racers[0].id !== undefined && racers[1].whole && tempFiles(dataDir).length >= 8,
        20_000
      )
      expect(racers[2].whole || racers[3].whole).toBe(false)
      // what was sent so far is what the gateway can have had
      killed = true
      first.child.kill("SIGKILL")
      await within(10_000, "the killed gateway to exit", new Promise<void>((resolve) => (first.child.exitCode !== null || first.child.signalCode !== null ? resolve() : first.child.once("close", () => resolve()))))
      expect(first.child.signalCode).toBe("SIGKILL")
      // every request has ended now (answered before the kill, or failed)
      await within(10_000, "every request to settle", Promise.all([...requests].map((r) => r.answer)))
      const leftBehind = tempFiles(dataDir)
      expect(leftBehind.length, "the crash left temporary files to clean up").toBeGreaterThanOrEqual(6)

      // --- restart on the same data dir ------------------------------------------------------------
      const second = await startChild(cwd, configFile)
      const acked = all.filter((s) => s.id !== undefined)
      expect(acked.length).toBeGreaterThanOrEqual(30)
      expect(phaseAIds.every((id) => acked.some((s) => s.id === id))).toBe(true)

      const listedIds: Array<string> = []
      for (const app of APPS) {
        const answer = await call(second.port, "GET", "/v1/files?order=asc", auth(app))
        expect(answer.status, answer.text).toBe(200)
        const listed = jsonOf(answer).data as Array<{ id: string; bytes: number }>
        const mine = all.filter((s) => s.app === app)
        const ackedHere = mine.filter((s) => s.id !== undefined)
        // every acknowledged file is listed, with its bytes
        for (const s of ackedHere) {
          const entry = listed.find((f) => f.id === s.id)
          expect(entry, `acknowledged ${s.label} (${s.id}) is listed`).toBeDefined()
          expect(entry?.bytes).toBe(s.data.length)
        }
        // any other listed file is one whose body was sent whole (its 200 not read before the kill)
        let unacknowledgedListed = 0
        for (const file of listed) {
          const content = await call(second.port, "GET", `/v1/files/${file.id}/content`, auth(app))
          expect(content.status, content.text).toBe(200)
          const digest = sha256(content.body)
          const owner = mine.find((s) => sha256(s.data) === digest)
          expect(owner, `listed ${file.id} has the bytes of an upload of ${app}`).toBeDefined()
          if (owner?.id !== undefined) {
            expect(owner.id, "the bytes are the ones acknowledged under this id").toBe(file.id)
          } else {
            unacknowledgedListed++
            expect(owner?.whole, `unacknowledged ${owner?.label} is listed but its body was never sent whole`).toBe(true)
            expect(owner?.neverCommitted, `${owner?.label} waited behind a save that never finished`).not.toBe(true)
          }
          listedIds.push(file.id)
        }
        expect(listed.length).toBe(ackedHere.length + unacknowledgedListed)
      }
      // the half-sent and waiting uploads are not there
      for (const s of all.filter((s) => !s.whole || s.neverCommitted === true)) expect(s.id, s.label).toBeUndefined()
      // app4's racer was answered before the kill (so it is listed, checked above)
      expect(racers[0].id).toBeDefined()

      // nothing in <dataDir>/files but the listed files: no *.tmp, no orphans
      expect(tempFiles(dataDir)).toEqual([])
      expect(storedNames(dataDir)).toEqual([...listedIds].sort())

      // the unfinished resumable uploads were dropped by the restart
      for (const [app, target] of [
        ["app8", resumable8],
        ["app9", resumable9]
      ] as const) {
        const withKey = await call(
          second.port,
          "POST",
          target,
          { "x-goog-api-key": keyOf(app), "x-goog-upload-command": "upload, finalize", "x-goog-upload-offset": "0", "content-type": "application/json" },
          resumableData
        )
        expect(withKey.status, withKey.text).toBe(404)
        const noKey = await call(
          second.port,
          "POST",
          target,
          { "x-goog-upload-command": "upload, finalize", "x-goog-upload-offset": "0", "content-type": "application/json" },
          resumableData
        )
        expect(noKey.status, noKey.text).toBe(401)
        const gemini = await call(second.port, "GET", "/v1beta/files?pageSize=100", { "x-goog-api-key": keyOf(app) })
        const names = ((jsonOf(gemini).files ?? []) as Array<{ displayName: string }>).map((f) => f.displayName)
        expect(names).toHaveLength(3)
        expect(names.filter((n) => n.startsWith("resumable"))).toEqual([])
      }
      expect(tempFiles(dataDir)).toEqual([])

      second.child.kill("SIGTERM")
      await within(10_000, "the restarted gateway to stop", new Promise<void>((resolve) => (second.child.exitCode !== null ? resolve() : second.child.once("close", () => resolve()))))
      expect(second.child.exitCode).toBe(0)
    },
    120_000
  )
})
