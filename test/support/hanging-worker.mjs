// A OneThread worker for tests (test/layers/wasm/OneThreadDeadline.test.ts): answers each request's
// `value`, or computes forever when the request says `hang`.
import { parentPort } from "node:worker_threads"

parentPort.on("message", ({ id, hang, value }) => {
  if (hang === true) for (;;);
  parentPort.postMessage({ id, ok: value })
})
