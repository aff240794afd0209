public func probeAdd(_ a: Int, _ b: Int) -> Int { a &+ b }
