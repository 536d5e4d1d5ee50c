// ioredis in its default settings against `sluice proxy` (tests/tests/gateway_clients.rs):
// RL.CHECK, a pipeline, RL.HIT. Prints one JSON line; exits non-zero on any failure.
// Usage: node sidecar_client.js PORT
const Redis = require("ioredis");

async function main() {
  const port = Number(process.argv[2]);
  const redis = new Redis({ port, host: "127.0.0.1" });
  try {
    const pong = await redis.ping();
    const one = await redis.call("RL.CHECK", "js", "5", "1h");
    const pipe = redis.pipeline();
    for (let i = 0; i < 10; i++) pipe.call("RL.CHECK", "js:pipe", "5", "1h");
    const results = await pipe.exec();
    const allowed = results.map(([err, r]) => {
      if (err) throw err;
      return r[0];
    });
    const info = await redis.call("CLIENT", "INFO");
    console.log(JSON.stringify({ pong, one, allowed, info: String(info).trim() }));
  } finally {
    redis.disconnect();
  }
}

main().catch((e) => {
  console.error(String((e && e.stack) || e));
  process.exit(1);
});
