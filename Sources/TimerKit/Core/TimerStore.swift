import Glibc

/// 4,096 record slots and their fire stats, in memory mapped for them: it never moves, and the
/// kernel backs a page only once it is written, so a chunk whose slots are unused costs
/// nothing. A registry owns its chunks and lends each to one scheduler at a time; a chunk
/// comes back with its slots' generations when its scheduler retires, so that an id (a slot
/// and its generation) is never handed out twice in a registry.
final class RecordChunk: @unchecked Sendable {
    // @unchecked: `records`, `stats` and `number` never change; `used` and the slots are read
    // and written only under the lock of the scheduler the chunk is lent to (one at a time,
    // handed over under the registry's lock); `owner` and `ownerIndex` only under the
    // registry's lock, both in `TimerRegistry.lendChunk` and `retire`.
    static let shift = 12
    static let size = 1 << shift
    static let mask = size - 1

    let records: UnsafeMutablePointer<TimerRecord>
    let stats: UnsafeMutablePointer<TimerFireStats>
    /// Its place in the registry's table: ids of its slots are `number << shift | offset`.
    let number: UInt32
    /// Slots ever used: those above have never been written.
    var used = 0
    /// The scheduler it is lent to, for lookups and listings, through its link: which holds the
    /// scheduler while it has live timers and nothing otherwise, so that a scheduler nobody
    /// uses goes whether or not it was shut down (`SchedulerLink`). Not weakly: a weak reference
    /// would give the scheduler a side table, and every retain of it would take the runtime's
    /// slow path (measured: +80 instructions per key pair, +210 per handle pair).
    var owner: SchedulerLink?
    /// Its place in the owner's store: set with `owner`, under the registry's lock.
    var ownerIndex = 0

    init?(number: UInt32) {
        let recordBytes = Self.size * MemoryLayout<TimerRecord>.stride
        let statsBytes = Self.size * MemoryLayout<TimerFireStats>.stride
        guard let records = Self.map(recordBytes) else { return nil }
        guard let stats = Self.map(statsBytes) else {
            munmap(records, recordBytes)
            return nil
        }
        self.records = records.bindMemory(to: TimerRecord.self, capacity: Self.size)
        self.stats = stats.bindMemory(to: TimerFireStats.self, capacity: Self.size)
        self.number = number
    }

    deinit {
        // Every slot's timer has ended by now (a scheduler frees its slots before it retires);
        // a slot that somehow still holds references gives them back.
        for index in 0..<used {
            records[index].owner = nil
            records[index].extras = nil
        }
        munmap(records, Self.size * MemoryLayout<TimerRecord>.stride)
        munmap(stats, Self.size * MemoryLayout<TimerFireStats>.stride)
    }

    /// Zeroed memory that the kernel maps lazily; nil when none can be had.
    private static func map(_ bytes: Int) -> UnsafeMutableRawPointer? {
        let memory = mmap(nil, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        guard let memory, memory != MAP_FAILED else { return nil }
        return memory
    }
}

/// A scheduler's timers: records in the slots of the chunks its registry lends it, found by a
/// slot number (`chunk index << RecordChunk.shift | offset`) that queue entries, keys and
/// handles carry. Slots are reused last-freed first, so the next schedule lands on a line
/// still in the cache. Plain data under the scheduler's lock.
struct TimerStore: ~Copyable {
    /// The records of each chunk, by the chunk's index in this store.
    private var records: UnsafeMutablePointer<UnsafeMutablePointer<TimerRecord>>
    private var stats: UnsafeMutablePointer<UnsafeMutablePointer<TimerFireStats>>
    private var capacity = 4
    private(set) var chunks: [RecordChunk] = []
    /// The last slot freed, each linking to the one before through its `orderSequence`.
    private var freeHead = Self.none
    /// Timers in the store: scheduled, suspended, or ended and still running a call.
    private(set) var occupied = 0
    /// Live timers (not ended), and the cap on them and how often it refused.
    var live = 0
    var maxLive = Int.max
    var refusedByLimit = 0

    static let none = UInt32.max

    init() {
        records = .allocate(capacity: capacity)
        stats = .allocate(capacity: capacity)
    }

    deinit {
        records.deallocate()
        stats.deallocate()
    }

    @inline(__always)
    subscript(slot: UInt32) -> UnsafeMutablePointer<TimerRecord> { table[slot] }

    /// The records by slot, as one word to pass around (see `RecordTable`).
    var table: RecordTable { RecordTable(chunks: records) }

    /// The fire statistics of the timer in `slot`.
    @inline(__always)
    func fireStats(_ slot: UInt32) -> TimerFireStats {
        self[slot].pointee.hasFireStats ? stats[Int(slot) &>> RecordChunk.shift][Int(slot) & RecordChunk.mask] : .zero
    }

    /// The fire statistics of the timer in `slot`, to write: zeroed on its first write.
    @inline(__always)
    func writableFireStats(_ slot: UInt32) -> UnsafeMutablePointer<TimerFireStats> {
        let written = stats[Int(slot) &>> RecordChunk.shift] + (Int(slot) & RecordChunk.mask)
        let record = self[slot]
        if !record.pointee.hasFireStats {
            written.pointee = .zero
            record.pointee.hasFireStats = true
        }
        return written
    }

    /// The registry-wide id of the timer in `slot`: its chunk's number and offset, and its
    /// generation.
    func id(of slot: UInt32, generation: UInt32) -> UInt64 {
        let chunk = chunks[Int(slot) &>> RecordChunk.shift]
        return UInt64(generation) << 32 | UInt64(chunk.number) << RecordChunk.shift | UInt64(Int(slot) & RecordChunk.mask)
    }

    /// A slot for a new timer; nil when every chunk is full: the caller then gives it another
    /// (`add(_:)`) and asks again.
    @inline(__always)
    mutating func allocate() -> UInt32? {
        if freeHead != Self.none {
            let slot = freeHead
            freeHead = UInt32(truncatingIfNeeded: self[slot].pointee.orderSequence)
            self[slot].pointee.orderSequence = 0
            occupied += 1
            return slot
        }
        if let last = chunks.last, last.used < RecordChunk.size {
            let slot = UInt32((chunks.count - 1) << RecordChunk.shift + last.used)
            last.used += 1
            occupied += 1
            return slot
        }
        return nil
    }

    /// Takes a chunk the registry lent: slots its earlier owners used are free (a slot whose
    /// generation ran out stays unused, so that no id comes back).
    mutating func add(_ chunk: RecordChunk) {
        if chunks.count == capacity {
            let larger = UnsafeMutablePointer<UnsafeMutablePointer<TimerRecord>>.allocate(capacity: capacity * 2)
            larger.moveInitialize(from: records, count: chunks.count)
            records.deallocate()
            records = larger
            let largerStats = UnsafeMutablePointer<UnsafeMutablePointer<TimerFireStats>>.allocate(capacity: capacity * 2)
            largerStats.moveInitialize(from: stats, count: chunks.count)
            stats.deallocate()
            stats = largerStats
            capacity *= 2
        }
        assert(chunk.ownerIndex == chunks.count, "TimerStore: chunk lent for place \(chunk.ownerIndex), added at \(chunks.count)")
        records[chunks.count] = chunk.records
        stats[chunks.count] = chunk.stats
        chunks.append(chunk)
        let base = (chunks.count - 1) << RecordChunk.shift
        for offset in (0..<chunk.used).reversed() where chunk.records[offset].generation < UInt32.max {
            link(UInt32(base + offset))
        }
        // `allocate` counted none of these.
    }

    /// Gives `slot` back: its generation moves on, so no key or handle finds its next timer.
    /// What the record held is released here (the caller has taken out whatever of the user's
    /// it held: an ended timer's owner and handler go to its carrier).
    @inline(__always)
    mutating func free(_ slot: UInt32) {
        let record = self[slot]
        // Most ended timers' owner was taken already, and most have no extras: a store of nil
        // over nil would still call the runtime to release the old value.
        if record.pointee.owner != nil { record.pointee.owner = nil }
        if record.pointee.extras != nil { record.pointee.extras = nil }
        record.pointee.entrySequence = 0
        record.pointee.callbackKind = 0
        record.pointee.activeCalls = 0
        record.pointee.hasFireStats = false
        occupied -= 1
        // A slot whose generation would wrap is kept out of use, so that no id ever comes back.
        guard record.pointee.generation < UInt32.max - 1 else {
            record.pointee.generation = UInt32.max
            return
        }
        record.pointee.generation += 1
        link(slot)
    }

    private mutating func link(_ slot: UInt32) {
        self[slot].pointee.orderSequence = UInt64(freeHead)
        freeHead = slot
    }

    /// Calls `body` with each occupied slot of chunks `from` to `from + count - 1` (a
    /// shutdown's or a listing's slice).
    func forEachOccupied(chunks range: Range<Int>, _ body: (UInt32) -> Void) {
        for index in range where index < chunks.count {
            for offset in 0..<chunks[index].used {
                let slot = UInt32(index << RecordChunk.shift + offset)
                if self[slot].pointee.owner != nil { body(slot) }
            }
        }
    }

    /// Hands every chunk back (the scheduler is retiring; every slot is free).
    mutating func takeChunks() -> [RecordChunk] {
        defer {
            chunks = []
            freeHead = Self.none
        }
        return chunks
    }
}

/// A store's records by slot, for the queues' tests of their entries under the scheduler's lock:
/// the address of the store's chunk table, one word, where a store passed borrowed from its
/// scheduler is copied whole. Good while the store gets no new chunk (the table may then move):
/// within one call that adds no timer.
struct RecordTable {
    let chunks: UnsafeMutablePointer<UnsafeMutablePointer<TimerRecord>>

    @inline(__always)
    subscript(slot: UInt32) -> UnsafeMutablePointer<TimerRecord> {
        chunks[Int(slot) &>> RecordChunk.shift] + (Int(slot) & RecordChunk.mask)
    }
}
