const inspector = require("node:inspector")
const fs = require("node:fs")
// KEEP=all (every allocation, collected ones too), promoted (those that survived the young
// generation), live (those still alive when sampling stops); the profile goes to OUT
const keep = process.env.KEEP ?? "all"
const out = process.env.OUT ?? "/tmp/alloc.heapprofile"
const session = new inspector.Session()
session.connect()
let on = false
process.on("SIGUSR2", () => {
  if (!on) {
    on = true
    session.post("HeapProfiler.enable", () =>
      session.post("HeapProfiler.startSampling", { samplingInterval: 4096, includeObjectsCollectedByMajorGC: keep !== "live", includeObjectsCollectedByMinorGC: keep === "all" }, (err) => console.error("MEM sampling started", err ?? ""))
    )
  } else {
    session.post("HeapProfiler.stopSampling", (err, { profile }) => {
      fs.writeFileSync(out, JSON.stringify(profile))
      console.error("MEM sampling written", err ?? "")
    })
  }
})
