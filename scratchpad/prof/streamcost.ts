import { Chunk, Effect, Stream, Option } from "effect"
const events = Array.from({ length: 20 }, (_, i) => ({ _tag: "Text", text: "piece" + i }))
const time = async (name: string, n: number, mk: () => Effect.Effect<unknown>) => {
  for (let i = 0; i < 300; i++) await Effect.runPromise(mk())
  const t = performance.now()
  for (let i = 0; i < n; i++) await Effect.runPromise(mk())
  console.log(name.padEnd(40), ((performance.now() - t) / n * 1000).toFixed(1), "µs/stream")
}
// source: 3 pulls of ~7 events, async each
const source = () => {
  let i = 0
  return Stream.repeatEffectChunkOption(Effect.async<Chunk.Chunk<any>, Option.Option<never>>((resume) => { setImmediate(() => { if (i >= 20) resume(Effect.fail(Option.none())); else { const c = Chunk.unsafeFromArray(events.slice(i, i + 7)); i += 7; resume(Effect.succeed(c)) } }) }))
}
await time("bare source runDrain", 3000, () => Stream.runDrain(source()))
await time("source + 1 mapChunks", 3000, () => Stream.runDrain(source().pipe(Stream.mapChunks((c) => c))))
await time("source + 10 mapChunks", 3000, () => { let s: Stream.Stream<any> = source(); for (let k = 0; k < 10; k++) s = Stream.mapChunks(s, (c) => c); return Stream.runDrain(s) })
await time("source + 10 map", 3000, () => { let s: Stream.Stream<any> = source(); for (let k = 0; k < 10; k++) s = Stream.map(s, (c) => c); return Stream.runDrain(s) })
await time("source + 5 concat", 3000, () => { let s: Stream.Stream<any> = source(); for (let k = 0; k < 5; k++) s = Stream.concat(s, Stream.make(1)); return Stream.runDrain(s) })
await time("source + ensuring", 3000, () => Stream.runDrain(source().pipe(Stream.ensuring(Effect.void))))
await time("source + interruptWhen sleep", 3000, () => Stream.runDrain(source().pipe(Stream.interruptWhen(Effect.sleep(100000)))))
await time("toPull scoped", 3000, () => Effect.scoped(Effect.flatMap(Stream.toPull(source()), (pull) => Stream.runDrain(Stream.repeatEffectChunkOption(pull)))))
await time("plain promise loop", 3000, () => Effect.promise(async () => { for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r)) }))
