#!/usr/bin/env node
// The server bench:loops measures: `brain serve` as shipped (configured from BRAIN_* like the CLI;
// sessions naming no agentloop run the WebAssembly official loop), plus the official loop's
// TypeScript reference (src/loops/official.ts, in the main thread) registered under the name
// "official-ts", so one process serves both and a benchmark can set them side by side; and an
// instant tool `t` that answers its input.
import { Effect } from "effect"
import { succeedAfter } from "../../dist/layers/ToolsInProcess.js"
import { officialLoop } from "../../dist/loops/official.js"
import { serve } from "../../dist/main.js"
import { fromConfig } from "../../dist/services/ServerConfigEnv.js"

const program = Effect.flatMap(fromConfig, (config) => serve(config, { loops: { "official-ts": officialLoop }, tools: { t: succeedAfter(0) } }))
Effect.runPromise(program).then(
  () => process.exit(0),
  (err) => {
    console.error(err)
    process.exit(1)
  }
)
