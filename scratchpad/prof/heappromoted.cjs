const inspector = require("node:inspector")
const fs = require("node:fs")
const session = new inspector.Session()
session.connect()
let on = false
process.on("SIGUSR2", () => {
  if (!on) {
    on = true
    session.post("HeapProfiler.enable", () =>
      session.post("HeapProfiler.startSampling", { samplingInterval: 4096, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: false }, (err) => console.error("MEM sampling started", err ?? ""))
    )
  } else {
    session.post("HeapProfiler.stopSampling", (err, { profile }) => {
      fs.writeFileSync("/tmp/promoted.heapprofile", JSON.stringify(profile))
      console.error("MEM sampling written", err ?? "")
    })
  }
})
