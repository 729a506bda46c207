// testing/ports.ts: the ports test stacks run on. A port inside the kernel's ephemeral range
// can be taken by a server binding port 0 (Temporal's dev server does) before ours binds it,
// and one handed out twice gives two services of one stack the same port.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import { test } from 'node:test';
import { freePort } from '../../../testing/ports';

test('freePort hands out distinct ports outside the ephemeral range', async () => {
  const [lo, hi] = fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number) as [number, number];
  const ports: number[] = [];
  for (let i = 0; i < 300; i++) ports.push(await freePort());
  assert.equal(new Set(ports).size, ports.length, 'a port was handed out twice');
  const inside = ports.filter((p) => p >= lo && p <= hi);
  assert.deepEqual(inside, [], `ports inside the ephemeral range ${lo}-${hi}`);
  assert.ok(ports.every((p) => p >= 20_000 && p <= 65_535));
  // Temporal's membership ports are smallint: a bound keeps them under it, and apart from the rest
  const low: number[] = [];
  for (let i = 0; i < 50; i++) low.push(await freePort(32_767));
  assert.ok(
    low.every((p) => p <= 32_767 && !ports.includes(p)),
    `ports above 32767 or handed out before: ${low.join(' ')}`,
  );
});
