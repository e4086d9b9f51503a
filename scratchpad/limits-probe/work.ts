/** The limits' own CPU per call, alone (what `bench --limits` reports as the deterministic figure). */
import { limitsWorkPerCall } from "../../bench/limits.js"

void limitsWorkPerCall().then((work) => console.log(work))
