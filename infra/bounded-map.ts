/**
 * A Map used as a small cache that keeps its newest entries: insertion order is
 * age, so setting a key makes it the newest and the oldest go past `keep`.
 * Pure (no Node imports): workflow code may use it.
 */
export function setNewest<K, V>(map: Map<K, V>, key: K, value: V, keep: number): V {
  map.delete(key);
  map.set(key, value);
  for (const old of map.keys()) if (map.size > keep) map.delete(old);
  return value;
}
