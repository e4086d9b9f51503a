import { Effect, Stream, Sink, Option } from "effect"
import { decodeBody } from "../src/protocols/Decode.js"
import { ChatRequest } from "../src/protocols/chat/Schema.js"
import { foldEvent, emptyAnswer, ModelEvent } from "../src/domain/Canonical.js"
import { Errors } from "../src/domain/Errors.js"

const body = { model: "up/gpt-test", messages: [{ role: "user", content: "Say hello" }] }
const dec = decodeBody(ChatRequest)
const time = async (name: string, n: number, f: () => Promise<unknown> | unknown) => {
  for (let i = 0; i < 200; i++) await f()
  const t = performance.now()
  for (let i = 0; i < n; i++) await f()
  console.log(name, ((performance.now() - t) / n * 1000).toFixed(1), "µs")
}
const events = [ModelEvent.text("Hello"), ModelEvent.text(" there"), ModelEvent.usage({ inputTokens: 1, outputTokens: 1, cacheReadTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0 }), ModelEvent.finish("stop")]
await time("decode", 5000, () => Effect.runSync(dec(body)))
await time("error", 5000, () => Errors.timeout("timeout", "x"))
await time("fold", 5000, () => Effect.runPromise(Stream.runFold(Stream.fromIterable(events), emptyAnswer, foldEvent)))
await time("peel+fold", 5000, () => Effect.runPromise(Effect.scoped(Effect.gen(function* () {
  const [first, rest] = yield* Stream.peel(Stream.fromIterable(events), Sink.head())
  const s = Option.isSome(first) ? Stream.concat(Stream.make(first.value), rest) : rest
  return yield* Stream.runFold(s, emptyAnswer, foldEvent)
}))))
await time("interruptWhen+fold", 5000, () => Effect.runPromise(Stream.runFold(Stream.fromIterable(events).pipe(Stream.interruptWhen(Effect.sleep(10000))), emptyAnswer, foldEvent)))
