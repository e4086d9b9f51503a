const v8 = require("node:v8")
process.on("SIGUSR2", () => {
  const m = process.memoryUsage()
  const mb = (x) => (x / 1048576).toFixed(1)
  const spaces = v8.getHeapSpaceStatistics().map((s) => `${s.space_name}:${mb(s.space_size)}/${mb(s.space_used_size)}`).join(" ")
  console.error(`MEM rss ${mb(m.rss)} heapTotal ${mb(m.heapTotal)} heapUsed ${mb(m.heapUsed)} external ${mb(m.external)} arrayBuffers ${mb(m.arrayBuffers)} | ${spaces}`)
})
process.on("SIGUSR1", () => {
  if (global.gc) { global.gc(); global.gc() }
  process.emit("SIGUSR2")
})
process.on("SIGUSR2", () => {
  const counts = {}
  for (const r of process.getActiveResourcesInfo()) counts[r] = (counts[r] ?? 0) + 1
  console.error("MEM resources " + JSON.stringify(counts))
})
