// The Node limiter libraries in their default settings against the server on port argv[2]:
// rate-limiter-flexible's RateLimiterRedis (3 points per 10 s, five consumes) and an express
// app behind express-rate-limit with rate-limit-redis (2 requests a minute, three requests).
// Prints one JSON line per library: what each call answered. tests/tests/node_limiters.rs
// runs it against redis-server and against Sluice and compares.
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');
const express = require('express');
const { rateLimit } = require('express-rate-limit');
const { RedisStore } = require('rate-limit-redis');

async function main() {
  const port = Number(process.argv[2]);
  const client = new Redis({ port, host: '127.0.0.1', enableOfflineQueue: false });
  await new Promise((resolve, reject) => {
    client.once('ready', resolve);
    client.once('error', reject);
  });

  const limiter = new RateLimiterRedis({ storeClient: client, points: 3, duration: 10, keyPrefix: 'rlf' });
  const consumed = [];
  for (let i = 0; i < 5; i++) {
    try {
      const r = await limiter.consume('user1');
      consumed.push(['allowed', r.remainingPoints, r.consumedPoints]);
    } catch (e) {
      if (e instanceof Error) throw e;
      consumed.push(['denied', e.remainingPoints, e.consumedPoints]);
    }
  }
  console.log(JSON.stringify({ 'rate-limiter-flexible': consumed }));

  const app = express();
  app.use(rateLimit({
    windowMs: 60000,
    limit: 2,
    standardHeaders: 'draft-7',
    legacyHeaders: false,
    store: new RedisStore({ sendCommand: (...args) => client.call(...args) }),
  }));
  app.get('/', (req, res) => res.send('hello'));
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const answers = [];
  for (let i = 0; i < 3; i++) {
    const r = await fetch(`http://127.0.0.1:${server.address().port}/`);
    answers.push([r.status, r.headers.get('ratelimit'), r.headers.get('ratelimit-policy')]);
  }
  console.log(JSON.stringify({ 'express-rate-limit': answers }));
  server.close();
  client.quit();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
