import Testing
@testable import CoreNodes
@testable import Nodes

@Suite("RTPPacket")
struct RTPPacketTests {
    @Test func roundTripsTheFixedHeader() throws {
        let p = RTPPacket(marker: true, payloadType: 96, sequenceNumber: 0xFFFE, timestamp: 0xDEAD_BEEF, ssrc: 0x0102_0304, payload: [1, 2, 3])
        let wire = p.serialized()
        #expect(wire.count == 15)
        #expect(wire[0] == 0x80 && wire[1] == 0xE0)   // V=2; M=1, PT=96
        #expect(Array(wire[2...3]) == [0xFF, 0xFE])
        #expect(Array(wire[8...11]) == [1, 2, 3, 4])
        #expect(try RTPPacket(parsing: wire) == p)
    }

    @Test func skipsCSRCsExtensionAndPadding() throws {
        var wire: [UInt8] = [0xB1, 96, 0, 7, 0, 0, 0x03, 0xC0, 0, 0, 0, 9]   // V=2, P=1, X=1, CC=1
        wire += [0, 0, 0, 5]                                                 // CSRC
        wire += [0xBE, 0xDE, 0, 1, 0xAA, 0xBB, 0xCC, 0xDD]                   // extension, one word
        wire += [0x42, 0x43]                                                 // payload
        wire += [0, 0, 3]                                                    // 3 bytes of padding
        let p = try RTPPacket(parsing: wire)
        #expect(p.csrcs == [5])
        #expect(p.sequenceNumber == 7 && p.timestamp == 960 && p.ssrc == 9)
        #expect(p.payload == [0x42, 0x43])
        #expect(!p.marker)
    }

    @Test func refusesGarbage() {
        #expect(throws: RTPPacket.ParseError.tooShort) { try RTPPacket(parsing: [0x80, 96, 0]) }
        #expect(throws: RTPPacket.ParseError.badVersion(1)) { try RTPPacket(parsing: [UInt8](repeating: 0x40, count: 20)) }
        #expect(throws: RTPPacket.ParseError.badPadding) { try RTPPacket(parsing: [0xA0, 96, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0xFF]) }
    }
}

@Suite("RTPReceptionStatistics")
struct RTPReceptionStatisticsTests {
    @Test func countsLossAcrossSequenceWrap() {
        var s = RTPReceptionStatistics()
        var seq: UInt16 = 65530
        for i in 0..<20 {
            if i != 3 && i != 9 {   // 65533 and 3 (after the wrap) are lost
                _ = s.record(sequenceNumber: seq, timestamp: UInt32(i * 960), arrival: Int64(i * 960))
            }
            seq &+= 1
        }
        #expect(s.expected == 20)
        #expect(s.received == 18)
        #expect(s.lost == 2)
        #expect(s.maxSequence == 65530 + 19)
        #expect(s.jitter == 0)
    }

    @Test func classifiesDuplicatesAndReordering() {
        var s = RTPReceptionStatistics()
        #expect(s.record(sequenceNumber: 10, timestamp: 0, arrival: 0) == .inOrder(10))
        #expect(s.record(sequenceNumber: 12, timestamp: 1920, arrival: 1920) == .inOrder(12))
        #expect(s.record(sequenceNumber: 11, timestamp: 960, arrival: 1930) == .reordered(11))
        #expect(s.record(sequenceNumber: 12, timestamp: 1920, arrival: 1940) == .duplicate)
        #expect(s.record(sequenceNumber: 10, timestamp: 0, arrival: 1950) == .duplicate)
        #expect(s.received == 3 && s.duplicated == 2 && s.reordered == 1 && s.lost == 0)
    }

    @Test func restartsAfterTwoConsecutiveFarPackets() {
        var s = RTPReceptionStatistics()
        _ = s.record(sequenceNumber: 100, timestamp: 0, arrival: 0)
        #expect(s.record(sequenceNumber: 40000, timestamp: 0, arrival: 1) == .outOfRange)
        #expect(s.record(sequenceNumber: 40001, timestamp: 960, arrival: 2) == .inOrder(40001))
        #expect(s.received == 1 && s.lost == 0)
    }

    @Test func jitterFollowsRFC3550() {
        var s = RTPReceptionStatistics()
        // Transit alternates by 480 units: J converges towards 480.
        for i in 0..<400 {
            _ = s.record(sequenceNumber: UInt16(i), timestamp: UInt32(i * 960), arrival: Int64(i * 960 + (i % 2) * 480))
        }
        #expect(abs(s.jitter - 480) < 1)
    }
}
