// Measures what common Effect constructs cost per request on this machine (µs per operation).
import { Effect, Either, Scope, Exit } from "effect"
import { decodeBody } from "../src/protocols/Decode.js"
import { ChatRequest } from "../src/protocols/chat/Schema.js"
import { decodeChat } from "../src/protocols/chat/Decode.js"

const time = async (name: string, n: number, f: () => Promise<unknown>) => {
  for (let i = 0; i < 2000; i++) await f()
  const t = performance.now()
  for (let i = 0; i < n; i++) await f()
  console.log(name.padEnd(40), ((performance.now() - t) / n * 1000).toFixed(2), "µs")
}
const body = { model: "up/gpt-test", messages: [{ role: "user", content: "Say hello" }] }
const dec = decodeBody(ChatRequest)
await time("runPromise(succeed)", 50000, () => Effect.runPromise(Effect.succeed(1)))
await time("gen with 5 yields", 50000, () => Effect.runPromise(Effect.gen(function* () { for (let i = 0; i < 5; i++) yield* Effect.succeed(i) })))
await time("timeoutFail(succeed)", 50000, () => Effect.runPromise(Effect.succeed(1).pipe(Effect.timeoutFail({ duration: 1000, onTimeout: () => "x" }))))
await time("scoped acquireRelease", 50000, () => Effect.runPromise(Effect.scoped(Effect.acquireRelease(Effect.void, () => Effect.void))))
await time("acquireUseRelease", 50000, () => Effect.runPromise(Effect.acquireUseRelease(Effect.void, () => Effect.void, () => Effect.void)))
await time("forEach 1 concurrency 1", 50000, () => Effect.runPromise(Effect.forEach([1], (x) => Effect.succeed(x))))
await time("async setImmediate", 50000, () => Effect.runPromise(Effect.async<number>((r) => void setImmediate(() => r(Effect.succeed(1))))))
await time("decodeBody(ChatRequest)", 50000, () => Effect.runPromise(dec(body)))
await time("decodeBody+decodeChat", 50000, () => Effect.runPromise(Effect.flatMap(dec(body), (w) => decodeChat(w, { maxChoices: 1, maxTools: 10 }))))
void Either; void Scope; void Exit
