import v8 from "node:v8"; if (process.env.SETFLAG) v8.setFlagsFromString("--no-allocation-site-pretenuring")
import http from "node:http"
import { Effect, Runtime, Scheduler } from "effect"
const inline = { scheduleTask: (task) => task(), shouldYield: () => false }
const immediate = { scheduleTask: (task) => setImmediate(task), shouldYield: (fiber) => fiber.currentOpCount > 2048 ? 0 : false }
import { globalScope } from "../../../node_modules/effect/dist/esm/internal/fiberScope.js"
if (process.env.NOROOTS) globalScope.add = () => {}
const mode = process.argv[2] ?? "effect"; const loops = Number(process.argv[3] ?? 50); const sleep = process.argv[4] !== "nosleep"
const run = Runtime.runFork(Runtime.defaultRuntime)
const server = http.createServer((req, res) => {
  if (mode === "trivial") {
    const parts = []; req.on("data", (d) => parts.push(d)); req.on("end", () => { run(Effect.sync(() => { const body = JSON.parse(Buffer.concat(parts).toString()); const out = JSON.stringify({ ok: true, model: body.model, pad: "x".repeat(300) }); res.writeHead(200, { "content-type": "application/json" }); res.end(out) })) })
    return
  }
  if (mode === "runsync") {
    const parts = []; req.on("data", (d) => parts.push(d)); req.on("end", () => { Effect.runSync(Effect.sync(() => { const body = JSON.parse(Buffer.concat(parts).toString()); const out = JSON.stringify({ ok: true, model: body.model, pad: "x".repeat(300) }); res.writeHead(200, { "content-type": "application/json" }); res.end(out) })) })
    return
  }
  if (mode === "asynconly") {
    run(Effect.flatMap(Effect.async((resume) => { const parts = []; req.on("data", (d) => parts.push(d)); req.on("end", () => resume(Effect.succeed(Buffer.concat(parts).toString()))) }), (text) => Effect.sync(() => { const body = JSON.parse(text); const out = JSON.stringify({ ok: true, model: body.model, pad: "x".repeat(300) }); res.writeHead(200, { "content-type": "application/json" }); res.end(out) })))
    return
  }
  if (mode === "promiseonly") {
    run(Effect.flatMap(Effect.promise(() => new Promise((resolve) => { const parts = []; req.on("data", (d) => parts.push(d)); req.on("end", () => resolve(Buffer.concat(parts).toString())) })), (text) => Effect.sync(() => { const body = JSON.parse(text); const out = JSON.stringify({ ok: true, model: body.model, pad: "x".repeat(300) }); res.writeHead(200, { "content-type": "application/json" }); res.end(out) })))
    return
  }
  if (mode === "asyncinline" || mode === "asyncimmediate") {
    run(Effect.withScheduler(Effect.flatMap(Effect.async((resume) => { const parts = []; req.on("data", (d) => parts.push(d)); req.on("end", () => resume(Effect.succeed(Buffer.concat(parts).toString()))) }), (text) => Effect.sync(() => { const body = JSON.parse(text); const out = JSON.stringify({ ok: true, model: body.model, pad: "x".repeat(300) }); res.writeHead(200, { "content-type": "application/json" }); res.end(out) })), mode === "asyncinline" ? inline : immediate))
    return
  }
  if (mode === "lateasync") {
    const parts = []; req.on("data", (d) => parts.push(d)); req.on("end", () => {
      run(Effect.flatMap(Effect.async((resume) => { setImmediate(() => resume(Effect.succeed(Buffer.concat(parts).toString()))) }), (text) => Effect.sync(() => { const body = JSON.parse(text); const out = JSON.stringify({ ok: true, model: body.model, pad: "x".repeat(300) }); res.writeHead(200, { "content-type": "application/json" }); res.end(out) })))
    })
    return
  }
  if (mode === "plainimmediate") {
    const parts = []; req.on("data", (d) => parts.push(d)); req.on("end", () => { setImmediate(() => { const body = JSON.parse(Buffer.concat(parts).toString()); const out = JSON.stringify({ ok: true, model: body.model, pad: "x".repeat(300) }); res.writeHead(200, { "content-type": "application/json" }); res.end(out) }) })
    return
  }
  if (mode === "plain") {
    const parts = []; req.on("data", (d) => parts.push(d)); req.on("end", () => { const body = JSON.parse(Buffer.concat(parts).toString()); const out = JSON.stringify({ ok: true, model: body.model, pad: "x".repeat(300) }); res.writeHead(200, { "content-type": "application/json" }); res.end(out) })
    return
  }
  const fiber = run(Effect.gen(function* () {
    const text = yield* Effect.async((resume) => { const parts = []; req.on("data", (d) => parts.push(d)); req.on("end", () => resume(Effect.succeed(Buffer.concat(parts).toString()))) })
    const body = JSON.parse(text)
    for (let i = 0; i < loops; i++) yield* Effect.succeed(i).pipe(Effect.map((x) => x + 1), Effect.flatMap((x) => Effect.sync(() => x)))
    if (sleep) yield* Effect.sleep(0)
    const out = JSON.stringify({ ok: true, model: body.model, pad: "x".repeat(300) })
    res.writeHead(200, { "content-type": "application/json" }); res.end(out)
  }))
  if (process.argv[5] !== "noclose") res.once("close", () => { if (!res.writableEnded) fiber.unsafeInterruptAsFork() })
})
server.listen(0, "127.0.0.1", () => console.log(`listening on http://127.0.0.1:${server.address().port}`))
