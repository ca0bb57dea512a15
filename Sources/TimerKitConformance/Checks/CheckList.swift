@_spi(BackendImplementation) import TimerKit

// The checks of each group, in the order they are listed: a check joins its group's list here.

extension Checks {
    static let checks: [ConformanceCheck] = [
        .init("oneShotFiresOnceAndNeverEarly", .contract, oneShotFiresOnceAndNeverEarly),
        .init("oneShotAtADeadline", .contract, oneShotAtADeadline),
        .init("timersFireInDeadlineOrder", .contract, timersFireInDeadlineOrder),
        .init("overdueTimersOnDifferentClocksFireInDeadlineOrder", .contract, overdueTimersOnDifferentClocksFireInDeadlineOrder),
        .init("equalDeadlinesFireInSchedulingOrder", .contract, equalDeadlinesFireInSchedulingOrder),
        .init(
            "aRescheduledTimerTakesItsPlaceAmongEqualDeadlinesAsOfItsReschedule", .contract,
            aRescheduledTimerTakesItsPlaceAmongEqualDeadlinesAsOfItsReschedule),
        .init("repeatsWithACountStayOnTheGrid", .contract, repeatsWithACountStayOnTheGrid),
        .init("skipDropsMissedTicksAndStaysOnTheGrid", .contract, skipDropsMissedTicksAndStaysOnTheGrid),
        .init("burstDeliversEveryMissedTick", .contract, burstDeliversEveryMissedTick),
        .init("delayRestartsTheGridAfterALateTick", .contract, delayRestartsTheGridAfterALateTick),
        .init("toleranceIsHonouredAsMayFireLate", .contract, toleranceIsHonouredAsMayFireLate),
        .init("handlersCanScheduleFromInsideAndFromManyThreads", .contract, handlersCanScheduleFromInsideAndFromManyThreads),
        .init("suspendTwiceThenResumeOnceRunsAgain", .contract, suspendTwiceThenResumeOnceRunsAgain),
        .init("noHandlerBeginsAfterCancelAndWaitReturns", .contract, noHandlerBeginsAfterCancelAndWaitReturns),
        .init("operationsAfterCancelAreTypedErrors", .contract, operationsAfterCancelAreTypedErrors),
        .init("aHandlerCanCancelItself", .contract, aHandlerCanCancelItself),
        .init("aOneShotIsLiveUntilItsCallReturns", .contract, aOneShotIsLiveUntilItsCallReturns),
        .init("cancelAndWaitWaitsForARunningHandler", .contract, cancelAndWaitWaitsForARunningHandler),
        .init(
            "aCallAlreadyBegunRunsItsHandlerAfterCancelAndCancelAndWaitWaitsForIt", .contract,
            aCallAlreadyBegunRunsItsHandlerAfterCancelAndCancelAndWaitWaitsForIt),
        .init("shutdownCancelsTimersAndRefusesNewOnes", .contract, shutdownCancelsTimersAndRefusesNewOnes),
        .init("aShutDownBackendLetsGoOfEverythingItWasGiven", .contract, aShutDownBackendLetsGoOfEverythingItWasGiven),
        .init("timersAreRegisteredUnderUniqueNames", .contract, timersAreRegisteredUnderUniqueNames),
        .init("aReleasedTargetEndsItsTimers", .contract, aReleasedTargetEndsItsTimers),
        .init("registryObserversRecordLateness", .contract, registryObserversRecordLateness),
    ]
}

extension Checks.Adversarial {
    static let checks: [ConformanceCheck] = [
        .init("aFinishedOneShotsCapturesMayCallBackWhenReleased", .adversarial, aFinishedOneShotsCapturesMayCallBackWhenReleased),
        .init("aCancelledTimersCapturesMayCallBackWhenReleased", .adversarial, aCancelledTimersCapturesMayCallBackWhenReleased),
        .init(
            "aTargetReleasedDuringItsActionMayCallBackFromItsDeinit", .adversarial, aTargetReleasedDuringItsActionMayCallBackFromItsDeinit),
        .init("observersMayCallBackWhenReleased", .adversarial, observersMayCallBackWhenReleased),
        .init("shutdownMayReleaseCapturesThatCallBack", .adversarial, shutdownMayReleaseCapturesThatCallBack),
        .init(
            "cancellingAtTheMomentOfFiringNeverHangsNorFiresAfterwards", .adversarial,
            cancellingAtTheMomentOfFiringNeverHangsNorFiresAfterwards),
        .init("suspendResumeAndRescheduleRacingFireKeepTheirPromises", .adversarial, suspendResumeAndRescheduleRacingFireKeepTheirPromises),
        .init("toleranceBeyondTheIntervalIsCappedAtHalfOfIt", .adversarial, toleranceBeyondTheIntervalIsCappedAtHalfOfIt),
        .init("shutdownFromInsideAHandler", .adversarial, shutdownFromInsideAHandler),
        .init("shutdownFromTheCallersQueueOrLoop", .adversarial, needs: [.callerContext], shutdownFromTheCallersQueueOrLoop),
        .init("afterShutdownReturnsNoHandlerIsRunning", .adversarial, afterShutdownReturnsNoHandlerIsRunning),
        .init("shutdownWhileOtherThreadsSchedule", .adversarial, shutdownWhileOtherThreadsSchedule),
        .init("resumeAndRescheduleAfterShutdownAreRefused", .adversarial, resumeAndRescheduleAfterShutdownAreRefused),
        .init("shutdownFromAnEndCallbackOfThatShutdownReturns", .adversarial, shutdownFromAnEndCallbackOfThatShutdownReturns),
        .init("endCallbacksOfALoopFailureMayShutTheBackendDown", .adversarial, endCallbacksOfALoopFailureMayShutTheBackendDown),
    ]
}

extension Checks.Helpers {
    static let checks: [ConformanceCheck] = [
        .init("aDebouncedBurstRunsTheLastCallsWorkOnceOnTheLoop", .helpers, aDebouncedBurstRunsTheLastCallsWorkOnceOnTheLoop),
        .init(
            "aLeadingThrottlerRunsTheFirstCallAndDropsTheRestOfItsWindow", .helpers,
            aLeadingThrottlerRunsTheFirstCallAndDropsTheRestOfItsWindow),
        .init("withTimeoutCancelsAnOperationThatRunsOutOfTime", .helpers, withTimeoutCancelsAnOperationThatRunsOutOfTime),
        .init(
            "callsAndCancelsRacingTheFiresFromOtherThreadsKeepTheirPromises", .helpers,
            callsAndCancelsRacingTheFiresFromOtherThreadsKeepTheirPromises),
        .init("workWhoseCapturesCallBackIntoTimerKitWhenReleased", .helpers, workWhoseCapturesCallBackIntoTimerKitWhenReleased),
        .init("shuttingDownFromInsideDebouncedWork", .helpers, shuttingDownFromInsideDebouncedWork),
        .init("anOwnedTimerIsCancelledWhenItsOwnerGoes", .helpers, anOwnedTimerIsCancelledWhenItsOwnerGoes),
        .init("theLiveTimerCapHolds", .helpers, theLiveTimerCapHolds),
        .init("everyTimerIsToldWhyItEnded", .helpers, everyTimerIsToldWhyItEnded),
        .init("aJitteredTimerFiresWithinItsWindowAfterEachGridPoint", .helpers, aJitteredTimerFiresWithinItsWindowAfterEachGridPoint),
        .init("asyncDebouncedWorkRunsOnceAsATaskOnTheLoop", .helpers, asyncDebouncedWorkRunsOnceAsATaskOnTheLoop),
    ]
}

extension Checks.Concurrency {
    static let checks: [ConformanceCheck] = [
        .init("aSleepEndsNoEarlierThanItsDeadline", .concurrency, needs: [.concurrency], aSleepEndsNoEarlierThanItsDeadline),
        .init("aSleepIsInTheRegistryWhileItWaits", .concurrency, needs: [.concurrency], aSleepIsInTheRegistryWhileItWaits),
        .init("cancellingTheTaskEndsTheSleepAtOnce", .concurrency, needs: [.concurrency], cancellingTheTaskEndsTheSleepAtOnce),
        .init("sleepingOnAShutDownBackendThrowsItsError", .concurrency, needs: [.concurrency], sleepingOnAShutDownBackendThrowsItsError),
        .init(
            "aCountedTickSequenceDeliversEveryTickOnTheGridAndEnds", .concurrency, needs: [.concurrency],
            aCountedTickSequenceDeliversEveryTickOnTheGridAndEnds),
        .init("aSlowConsumerIsALateHandler", .concurrency, needs: [.concurrency], aSlowConsumerIsALateHandler),
        .init(
            "aTickThatComesWhileTheConsumerIsBusyIsKeptOrCounted", .concurrency, needs: [.concurrency],
            aTickThatComesWhileTheConsumerIsBusyIsKeptOrCounted),
        .init("aBurstingSequenceDeliversEveryMissedTick", .concurrency, needs: [.concurrency], aBurstingSequenceDeliversEveryMissedTick),
        .init(
            "theSequenceEndsWhenItsTimerIsCancelledByNameOrItsBackendShutsDown", .concurrency, needs: [.concurrency],
            theSequenceEndsWhenItsTimerIsCancelledByNameOrItsBackendShutsDown),
        .init(
            "cancellingTheConsumersTaskOrDroppingTheSequenceCancelsTheTimer", .concurrency, needs: [.concurrency],
            cancellingTheConsumersTaskOrDroppingTheSequenceCancelsTheTimer),
        .init("aSequenceIsIteratedOnce", .concurrency, needs: [.concurrency], aSequenceIsIteratedOnce),
        .init(
            "repeatsOfATaskAreFixedDelayAndNeverOverlap", .concurrency, needs: [.concurrency], repeatsOfATaskAreFixedDelayAndNeverOverlap),
        .init(
            "cancellingATaskTimerCancelsItsRunningTaskAndEndedWaitsForIt", .concurrency, needs: [.concurrency],
            cancellingATaskTimerCancelsItsRunningTaskAndEndedWaitsForIt),
        .init(
            "aTaskTimersTasksRunOnTheExecutorTheyPrefer", .concurrency, needs: [.concurrency], aTaskTimersTasksRunOnTheExecutorTheyPrefer),
        .init(
            "endedReturnsOnceATimerHasEndedAndItsHandlerReturned", .concurrency, needs: [.concurrency],
            endedReturnsOnceATimerHasEndedAndItsHandlerReturned),
        .init("aTimeoutAroundEndedReturnsWhenItRunsOut", .concurrency, needs: [.concurrency], aTimeoutAroundEndedReturnsWhenItRunsOut),
        .init("aTaskMayBeIsolatedToTheMainActor", .concurrency, needs: [.concurrency], aTaskMayBeIsolatedToTheMainActor),
        .init(
            "aTaskOnTheLoopRunsThereAndResumesThereFromItsTimers", .concurrency, needs: [.realTime, .concurrency],
            aTaskOnTheLoopRunsThereAndResumesThereFromItsTimers),
        .init(
            "aTaskThatKeepsYieldingOnTheLoopDoesNotStarveItsTimers", .concurrency, needs: [.realTime, .concurrency],
            aTaskThatKeepsYieldingOnTheLoopDoesNotStarveItsTimers),
        .init(
            "tasksOnTheLoopCarryOnAfterTheBackendShutsDown", .concurrency, needs: [.realTime, .concurrency],
            tasksOnTheLoopCarryOnAfterTheBackendShutsDown),
        .init(
            "aJobRunningWhenTheBackendShutsDownFinishesOnTheLoopFirst", .concurrency, needs: [.realTime, .concurrency],
            aJobRunningWhenTheBackendShutsDownFinishesOnTheLoopFirst),
        .init("aTaskOnTheLoopMayShutTheBackendDown", .concurrency, needs: [.realTime, .concurrency], aTaskOnTheLoopMayShutTheBackendDown),
    ]
}

extension Checks.DisplayDelivery {
    static let checks: [ConformanceCheck] = [
        .init(
            "slowCallbacksDropFramesAndNothingArrivesAfterInvalidate", .displayDelivery, needs: [.displayDelivery],
            slowCallbacksDropFramesAndNothingArrivesAfterInvalidate),
        .init("aPausedLinkIsSilentAndKeepsItsTarget", .displayDelivery, needs: [.displayDelivery], aPausedLinkIsSilentAndKeepsItsTarget),
    ]
}

extension Checks.Stress {
    static let checks: [ConformanceCheck] = [
        .init("randomOperationsFromManyThreadsKeepEveryPromise", .stress, randomOperationsFromManyThreadsKeepEveryPromise)
    ]
}

extension Checks.Clocks {
    static let checks: [ConformanceCheck] = [
        .init("aWallTimerFiresNoEarlierThanItsDate", .clocks, aWallTimerFiresNoEarlierThanItsDate),
        .init("aContinuousTimerFiresAfterItsDelay", .clocks, aContinuousTimerFiresAfterItsDelay),
        .init("aWallGridFiresOnItsDates", .clocks, aWallGridFiresOnItsDates),
    ]
}

extension Checks.Keys {
    static let checks: [ConformanceCheck] = [
        .init("aKeyedOneShotFiresOnceThenItsCallbackHearsTheEnd", .keys, aKeyedOneShotFiresOnceThenItsCallbackHearsTheEnd),
        .init("aKeyedRepeatWithACountFiresThatManyTimesOnItsGrid", .keys, aKeyedRepeatWithACountFiresThatManyTimesOnItsGrid),
        .init("cancellingAKeyEndsItOnceAndLeavesOnlyTypedErrors", .keys, cancellingAKeyEndsItOnceAndLeavesOnlyTypedErrors),
        .init("aKeyOfAnotherBackendIsRefusedAndChangesNothing", .keys, aKeyOfAnotherBackendIsRefusedAndChangesNothing),
        .init("anEndedKeyNeverReachesItsSlotsNextTimer", .keys, anEndedKeyNeverReachesItsSlotsNextTimer),
        .init("rescheduleSuspendAndResumeThroughAKey", .keys, rescheduleSuspendAndResumeThroughAKey),
        .init("keyedTimersShareTheRegistry", .keys, keyedTimersShareTheRegistry),
        .init("shutdownEndsKeyedTimersAndTellsEachCallbackOnce", .keys, shutdownEndsKeyedTimersAndTellsEachCallbackOnce),
        .init("aCallbackIsLetGoOfOnceItsTimerEnds", .keys, aCallbackIsLetGoOfOnceItsTimerEnds),
        .init("aCallbacksEndAndReleaseMayCallBackIntoTheBackend", .keys, aCallbacksEndAndReleaseMayCallBackIntoTheBackend),
        .init("aCallbackMayCancelItsOwnTimer", .keys, aCallbackMayCancelItsOwnTimer),
        .init("cancelsRacingFiresFromManyThreadsEndEachTimerOnce", .keys, cancelsRacingFiresFromManyThreadsEndEachTimerOnce),
    ]
}
