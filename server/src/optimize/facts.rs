//! Static facts about one kernel for the strategy (being written).
