// An origin's storage as a context keeps it (context.rs): its localStorage
// and its IndexedDB databases. Evaluated on a page of the grid's own at the
// origin, never on a lessee's page. `dump(budget, room)` answers JSON text,
// or `{"over": N}` when the dump would take N UTF-8 bytes, more than `room`:
// the page measures, so an origin too big for what is left of the context's
// bound never crosses to the grid. `restore()` writes a dump back into a
// browser that holds none of it yet and answers how many databases it could
// not.
//
// localStorage is read and written by key (`length`, `key(i)`, `getItem`,
// `setItem`) and carried as [key, value] pairs, never as an object's
// properties: a key named like a member of Storage or Object (`length`,
// `getItem`, `constructor`, `__proto__`) is an item like any other.
//
// IndexedDB values are what structured clone stores, which JSON does not
// carry: every object and array is written tagged by its kind ({"$o": [[key,
// value], ...]}, {"$a": [...]}, {"$d": ms}, ...), so only strings, numbers,
// booleans and null go bare and a tag never meets a value of the page's.
// A database holding a value no tag carries (a CryptoKey, a FileSystemHandle)
// is left out whole: half a database would be a state the site never had. So
// is one that would take the origin's databases past `budget` characters of
// JSON: a site's large cache must not make the whole state too big to save,
// cookies and sign-in with it.
({
  async dump(budget, room) {
    const done = (r) => new Promise((ok, no) => { r.onsuccess = () => ok(r.result); r.onerror = () => no(r.error); });
    const base64 = (bytes) => {
      let s = '';
      for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
      return btoa(s);
    };
    const encode = async (v) => {
      if (v === null || typeof v === 'string' || typeof v === 'boolean') return v;
      if (typeof v === 'number') return Number.isFinite(v) ? v : { $n: String(v) };
      if (typeof v === 'undefined') return { $u: 0 };
      if (typeof v === 'bigint') return { $b: v.toString() };
      if (Array.isArray(v)) return { $a: await Promise.all(v.map(encode)) };
      if (v instanceof Date) return { $d: v.getTime() };
      if (v instanceof RegExp) return { $r: [v.source, v.flags] };
      if (v instanceof ArrayBuffer) return { $ab: base64(new Uint8Array(v)) };
      if (ArrayBuffer.isView(v)) {
        return { $v: [v.constructor.name, base64(new Uint8Array(v.buffer, v.byteOffset, v.byteLength))] };
      }
      if (v instanceof Blob) {
        const bytes = base64(new Uint8Array(await v.arrayBuffer()));
        return { $blob: [v.type, bytes, v instanceof File ? v.name : null, v instanceof File ? v.lastModified : null] };
      }
      if (v instanceof Map) return { $m: await Promise.all([...v].map(async ([k, x]) => [await encode(k), await encode(x)])) };
      if (v instanceof Set) return { $s: await Promise.all([...v].map(encode)) };
      if (Object.getPrototypeOf(v) === Object.prototype || Object.getPrototypeOf(v) === null) {
        return { $o: await Promise.all(Object.entries(v).map(async ([k, x]) => [k, await encode(x)])) };
      }
      throw new Error(`a value of kind ${Object.prototype.toString.call(v)} is not kept`);
    };
    const items = [];
    for (let i = 0; i < localStorage.length; i++) {
      const key = localStorage.key(i);
      items.push([key, localStorage.getItem(key)]);
    }
    // localStorage alone past the room: the databases need not be read.
    const itemBytes = new TextEncoder().encode(JSON.stringify(items)).length;
    if (itemBytes > room) return JSON.stringify({ over: itemBytes });
    const databases = [];
    let used = 0;
    for (const { name, version } of await indexedDB.databases()) {
      let db;
      try {
        db = await done(indexedDB.open(name));
        const stores = [];
        for (const storeName of db.objectStoreNames) {
          const store = db.transaction(storeName, 'readonly').objectStore(storeName);
          const indexes = [...store.indexNames].map((n) => {
            const i = store.index(n);
            return { name: n, keyPath: i.keyPath, unique: i.unique, multiEntry: i.multiEntry };
          });
          const [keys, values] = await Promise.all([done(store.getAllKeys()), done(store.getAll())]);
          const records = [];
          for (let i = 0; i < keys.length; i++) records.push([await encode(keys[i]), await encode(values[i])]);
          stores.push({ name: storeName, keyPath: store.keyPath, autoIncrement: store.autoIncrement, indexes, records });
        }
        const size = JSON.stringify(stores).length;
        if (used + size <= budget) {
          databases.push({ name, version, stores });
          used += size;
        }
      } catch (e) {
        // Left out whole (see above).
      } finally {
        if (db) db.close();
      }
    }
    const text = JSON.stringify({ localStorage: items, indexedDb: databases });
    const bytes = new TextEncoder().encode(text).length;
    return bytes <= room ? text : JSON.stringify({ over: bytes });
  },

  async restore(items, databases) {
    for (const [k, v] of items) localStorage.setItem(k, v);
    const done = (r) => new Promise((ok, no) => { r.onsuccess = () => ok(r.result); r.onerror = () => no(r.error); });
    const bytes = (b64) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const views = ['Int8Array', 'Uint8Array', 'Uint8ClampedArray', 'Int16Array', 'Uint16Array', 'Int32Array',
      'Uint32Array', 'Float32Array', 'Float64Array', 'BigInt64Array', 'BigUint64Array', 'DataView'];
    const decode = (v) => {
      if (v === null || typeof v !== 'object') return v;
      const [[tag, x]] = Object.entries(v);
      switch (tag) {
        case '$n': return Number(x);
        case '$u': return undefined;
        case '$b': return BigInt(x);
        case '$a': return x.map(decode);
        case '$d': return new Date(x);
        case '$r': return new RegExp(x[0], x[1]);
        case '$ab': return bytes(x).buffer;
        case '$v': {
          if (!views.includes(x[0])) throw new Error(`unknown view ${x[0]}`);
          return new globalThis[x[0]](bytes(x[1]).buffer);
        }
        case '$blob': {
          const [type, b64, name, lastModified] = x;
          return name === null ? new Blob([bytes(b64)], { type }) : new File([bytes(b64)], name, { type, lastModified });
        }
        case '$m': return new Map(x.map(([k, y]) => [decode(k), decode(y)]));
        case '$s': return new Set(x.map(decode));
        case '$o': return Object.fromEntries(x.map(([k, y]) => [k, decode(y)]));
        default: throw new Error(`unknown tag ${tag}`);
      }
    };
    // A database that does not go back (its version taken meanwhile, the
    // disk's quota reached) is left out; the others and localStorage stay.
    let left = 0;
    for (const saved of databases) {
      let db;
      try {
        const open = indexedDB.open(saved.name, saved.version);
        open.onupgradeneeded = () => {
          for (const s of saved.stores) {
            const store = open.result.createObjectStore(s.name, { keyPath: s.keyPath, autoIncrement: s.autoIncrement });
            for (const i of s.indexes) store.createIndex(i.name, i.keyPath, { unique: i.unique, multiEntry: i.multiEntry });
          }
        };
        db = await done(open);
        for (const s of saved.stores) {
          if (s.records.length === 0) continue;
          const tx = db.transaction(s.name, 'readwrite');
          const store = tx.objectStore(s.name);
          for (const [k, v] of s.records) {
            if (s.keyPath === null) store.put(decode(v), decode(k));
            else store.put(decode(v));
          }
          await new Promise((ok, no) => { tx.oncomplete = ok; tx.onerror = () => no(tx.error); tx.onabort = () => no(tx.error); });
        }
      } catch (e) {
        left += 1;
      } finally {
        if (db) db.close();
      }
    }
    return left;
  },
})
