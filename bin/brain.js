#!/usr/bin/env -S node --max-semi-space-size=32
// The `brain` command. A larger young generation (--max-semi-space-size, in the shebang and in
// `npm start`: src/cli/nodeFlags.ts) cuts the server's garbage-collection time: turns allocate many
// short-lived objects. `node bin/brain.js serve` runs without it (V8 reads it only at start, and
// Node cannot exec itself again in place): the server says so at start.
// The journal syncs many session files at once through libuv's threadpool;
// its size is read once, when the pool starts, so it is set here before anything runs.
process.env.UV_THREADPOOL_SIZE ??= "64"
// The command as one bundled module (scripts/bundle.js): it loads in about half the time.
await import("../dist/brain.mjs")
