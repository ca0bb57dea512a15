@_spi(BackendImplementation) import TimerKit

// The checks of each group, in the order they are listed. A check joins its group's list here.

extension ConformanceCheck {
    static let contract: [ConformanceCheck] = [
        ConformanceCheck("oneShotFiresOnceAndNeverEarly", .contract, Checks.oneShotFiresOnceAndNeverEarly),
        ConformanceCheck("oneShotAtADeadline", .contract, Checks.oneShotAtADeadline),
        ConformanceCheck("timersFireInDeadlineOrder", .contract, Checks.timersFireInDeadlineOrder),
        ConformanceCheck("equalDeadlinesFireInSchedulingOrder", .contract, Checks.equalDeadlinesFireInSchedulingOrder),
        ConformanceCheck("repeatsWithACountStayOnTheGrid", .contract, Checks.repeatsWithACountStayOnTheGrid),
        ConformanceCheck("skipDropsMissedTicksAndStaysOnTheGrid", .contract, Checks.skipDropsMissedTicksAndStaysOnTheGrid),
        ConformanceCheck("burstDeliversEveryMissedTick", .contract, Checks.burstDeliversEveryMissedTick),
        ConformanceCheck("delayRestartsTheGridAfterALateTick", .contract, Checks.delayRestartsTheGridAfterALateTick),
        ConformanceCheck("toleranceIsHonouredAsMayFireLate", .contract, Checks.toleranceIsHonouredAsMayFireLate),
        ConformanceCheck("handlersCanScheduleFromInsideAndFromManyThreads", .contract, Checks.handlersCanScheduleFromInsideAndFromManyThreads),
        ConformanceCheck("suspendTwiceThenResumeOnceRunsAgain", .contract, Checks.suspendTwiceThenResumeOnceRunsAgain),
        ConformanceCheck("noHandlerBeginsAfterCancelAndWaitReturns", .contract, Checks.noHandlerBeginsAfterCancelAndWaitReturns),
        ConformanceCheck("operationsAfterCancelAreTypedErrors", .contract, Checks.operationsAfterCancelAreTypedErrors),
        ConformanceCheck("aHandlerCanCancelItself", .contract, Checks.aHandlerCanCancelItself),
        ConformanceCheck("cancelAndWaitWaitsForARunningHandler", .contract, Checks.cancelAndWaitWaitsForARunningHandler),
        ConformanceCheck("aCallAlreadyBegunRunsItsHandlerAfterCancelAndCancelAndWaitWaitsForIt", .contract, Checks.aCallAlreadyBegunRunsItsHandlerAfterCancelAndCancelAndWaitWaitsForIt),
        ConformanceCheck("shutdownCancelsTimersAndRefusesNewOnes", .contract, Checks.shutdownCancelsTimersAndRefusesNewOnes),
        ConformanceCheck("aShutDownBackendLetsGoOfEverythingItWasGiven", .contract, Checks.aShutDownBackendLetsGoOfEverythingItWasGiven),
        ConformanceCheck("timersAreRegisteredUnderUniqueNames", .contract, Checks.timersAreRegisteredUnderUniqueNames),
        ConformanceCheck("aReleasedTargetEndsItsTimers", .contract, Checks.aReleasedTargetEndsItsTimers),
        ConformanceCheck("registryObserversRecordLateness", .contract, Checks.registryObserversRecordLateness),
    ]
    static let adversarial: [ConformanceCheck] = [
        ConformanceCheck("aFinishedOneShotsCapturesMayCallBackWhenReleased", .adversarial, Checks.Adversarial.aFinishedOneShotsCapturesMayCallBackWhenReleased),
        ConformanceCheck("aCancelledTimersCapturesMayCallBackWhenReleased", .adversarial, Checks.Adversarial.aCancelledTimersCapturesMayCallBackWhenReleased),
        ConformanceCheck("aTargetReleasedDuringItsActionMayCallBackFromItsDeinit", .adversarial, Checks.Adversarial.aTargetReleasedDuringItsActionMayCallBackFromItsDeinit),
        ConformanceCheck("observersMayCallBackWhenReleased", .adversarial, Checks.Adversarial.observersMayCallBackWhenReleased),
        ConformanceCheck("shutdownMayReleaseCapturesThatCallBack", .adversarial, Checks.Adversarial.shutdownMayReleaseCapturesThatCallBack),
        ConformanceCheck("cancellingAtTheMomentOfFiringNeverHangsNorFiresAfterwards", .adversarial, Checks.Adversarial.cancellingAtTheMomentOfFiringNeverHangsNorFiresAfterwards),
        ConformanceCheck("suspendResumeAndRescheduleRacingFireKeepTheirPromises", .adversarial, Checks.Adversarial.suspendResumeAndRescheduleRacingFireKeepTheirPromises),
        ConformanceCheck("toleranceBeyondTheIntervalIsCappedAtHalfOfIt", .adversarial, Checks.Adversarial.toleranceBeyondTheIntervalIsCappedAtHalfOfIt),
        ConformanceCheck("shutdownFromInsideAHandler", .adversarial, Checks.Adversarial.shutdownFromInsideAHandler),
        ConformanceCheck("shutdownFromTheCallersQueueOrLoop", .adversarial, needs: [.callerContext], Checks.Adversarial.shutdownFromTheCallersQueueOrLoop),
        ConformanceCheck("afterShutdownReturnsNoHandlerIsRunning", .adversarial, Checks.Adversarial.afterShutdownReturnsNoHandlerIsRunning),
        ConformanceCheck("shutdownWhileOtherThreadsSchedule", .adversarial, Checks.Adversarial.shutdownWhileOtherThreadsSchedule),
        ConformanceCheck("resumeAndRescheduleAfterShutdownAreRefused", .adversarial, Checks.Adversarial.resumeAndRescheduleAfterShutdownAreRefused),
    ]
    static let helpers: [ConformanceCheck] = [
        ConformanceCheck("aDebouncedBurstRunsTheLastCallsWorkOnceOnTheLoop", .helpers, Checks.Helpers.aDebouncedBurstRunsTheLastCallsWorkOnceOnTheLoop),
        ConformanceCheck("aLeadingThrottlerRunsTheFirstCallAndDropsTheRestOfItsWindow", .helpers, Checks.Helpers.aLeadingThrottlerRunsTheFirstCallAndDropsTheRestOfItsWindow),
        ConformanceCheck("withTimeoutCancelsAnOperationThatRunsOutOfTime", .helpers, Checks.Helpers.withTimeoutCancelsAnOperationThatRunsOutOfTime),
        ConformanceCheck("callsAndCancelsRacingTheFiresFromOtherThreadsKeepTheirPromises", .helpers, Checks.Helpers.callsAndCancelsRacingTheFiresFromOtherThreadsKeepTheirPromises),
        ConformanceCheck("workWhoseCapturesCallBackIntoTimerKitWhenReleased", .helpers, Checks.Helpers.workWhoseCapturesCallBackIntoTimerKitWhenReleased),
        ConformanceCheck("shuttingDownFromInsideDebouncedWork", .helpers, Checks.Helpers.shuttingDownFromInsideDebouncedWork),
        ConformanceCheck("anOwnedTimerIsCancelledWhenItsOwnerGoes", .helpers, Checks.Helpers.anOwnedTimerIsCancelledWhenItsOwnerGoes),
        ConformanceCheck("theLiveTimerCapHolds", .helpers, Checks.Helpers.theLiveTimerCapHolds),
        ConformanceCheck("everyTimerIsToldWhyItEnded", .helpers, Checks.Helpers.everyTimerIsToldWhyItEnded),
        ConformanceCheck("aJitteredTimerFiresWithinItsWindowAfterEachGridPoint", .helpers, Checks.Helpers.aJitteredTimerFiresWithinItsWindowAfterEachGridPoint),
        ConformanceCheck("asyncDebouncedWorkRunsOnceAsATaskOnTheLoop", .helpers, Checks.Helpers.asyncDebouncedWorkRunsOnceAsATaskOnTheLoop),
    ]
    static let concurrency: [ConformanceCheck] = [
        ConformanceCheck("aSleepEndsNoEarlierThanItsDeadline", .concurrency, needs: [.concurrency], Checks.Concurrency.aSleepEndsNoEarlierThanItsDeadline),
        ConformanceCheck("aSleepIsInTheRegistryWhileItWaits", .concurrency, needs: [.concurrency], Checks.Concurrency.aSleepIsInTheRegistryWhileItWaits),
        ConformanceCheck("cancellingTheTaskEndsTheSleepAtOnce", .concurrency, needs: [.concurrency], Checks.Concurrency.cancellingTheTaskEndsTheSleepAtOnce),
        ConformanceCheck("sleepingOnAShutDownBackendThrowsItsError", .concurrency, needs: [.concurrency], Checks.Concurrency.sleepingOnAShutDownBackendThrowsItsError),
        ConformanceCheck("aCountedTickSequenceDeliversEveryTickOnTheGridAndEnds", .concurrency, needs: [.concurrency], Checks.Concurrency.aCountedTickSequenceDeliversEveryTickOnTheGridAndEnds),
        ConformanceCheck("aSlowConsumerIsALateHandler", .concurrency, needs: [.concurrency], Checks.Concurrency.aSlowConsumerIsALateHandler),
        ConformanceCheck("aTickThatComesWhileTheConsumerIsBusyIsKeptOrCounted", .concurrency, needs: [.concurrency], Checks.Concurrency.aTickThatComesWhileTheConsumerIsBusyIsKeptOrCounted),
        ConformanceCheck("aBurstingSequenceDeliversEveryMissedTick", .concurrency, needs: [.concurrency], Checks.Concurrency.aBurstingSequenceDeliversEveryMissedTick),
        ConformanceCheck("theSequenceEndsWhenItsTimerIsCancelledByNameOrItsBackendShutsDown", .concurrency, needs: [.concurrency], Checks.Concurrency.theSequenceEndsWhenItsTimerIsCancelledByNameOrItsBackendShutsDown),
        ConformanceCheck("cancellingTheConsumersTaskOrDroppingTheSequenceCancelsTheTimer", .concurrency, needs: [.concurrency], Checks.Concurrency.cancellingTheConsumersTaskOrDroppingTheSequenceCancelsTheTimer),
        ConformanceCheck("aSequenceIsIteratedOnce", .concurrency, needs: [.concurrency], Checks.Concurrency.aSequenceIsIteratedOnce),
        ConformanceCheck("repeatsOfATaskAreFixedDelayAndNeverOverlap", .concurrency, needs: [.concurrency], Checks.Concurrency.repeatsOfATaskAreFixedDelayAndNeverOverlap),
        ConformanceCheck("cancellingATaskTimerCancelsItsRunningTaskAndEndedWaitsForIt", .concurrency, needs: [.concurrency], Checks.Concurrency.cancellingATaskTimerCancelsItsRunningTaskAndEndedWaitsForIt),
        ConformanceCheck("endedReturnsOnceATimerHasEndedAndItsHandlerReturned", .concurrency, needs: [.concurrency], Checks.Concurrency.endedReturnsOnceATimerHasEndedAndItsHandlerReturned),
        ConformanceCheck("aTimeoutAroundEndedReturnsWhenItRunsOut", .concurrency, needs: [.concurrency], Checks.Concurrency.aTimeoutAroundEndedReturnsWhenItRunsOut),
        ConformanceCheck("aTaskMayBeIsolatedToTheMainActor", .concurrency, needs: [.concurrency], Checks.Concurrency.aTaskMayBeIsolatedToTheMainActor),
        ConformanceCheck("aTaskOnTheLoopRunsThereAndResumesThereFromItsTimers", .concurrency, needs: [.realTime, .concurrency], Checks.Concurrency.aTaskOnTheLoopRunsThereAndResumesThereFromItsTimers),
        ConformanceCheck("aTaskThatKeepsYieldingOnTheLoopDoesNotStarveItsTimers", .concurrency, needs: [.realTime, .concurrency], Checks.Concurrency.aTaskThatKeepsYieldingOnTheLoopDoesNotStarveItsTimers),
        ConformanceCheck("tasksOnTheLoopCarryOnAfterTheBackendShutsDown", .concurrency, needs: [.realTime, .concurrency], Checks.Concurrency.tasksOnTheLoopCarryOnAfterTheBackendShutsDown),
        ConformanceCheck("aJobRunningWhenTheBackendShutsDownFinishesOnTheLoopFirst", .concurrency, needs: [.realTime, .concurrency], Checks.Concurrency.aJobRunningWhenTheBackendShutsDownFinishesOnTheLoopFirst),
        ConformanceCheck("aTaskOnTheLoopMayShutTheBackendDown", .concurrency, needs: [.realTime, .concurrency], Checks.Concurrency.aTaskOnTheLoopMayShutTheBackendDown),
    ]
    static let displayDelivery: [ConformanceCheck] = [
        ConformanceCheck("slowCallbacksDropFramesAndNothingArrivesAfterInvalidate", .displayDelivery, needs: [.displayDelivery], Checks.DisplayDelivery.slowCallbacksDropFramesAndNothingArrivesAfterInvalidate),
        ConformanceCheck("aPausedLinkIsSilentAndKeepsItsTarget", .displayDelivery, needs: [.displayDelivery], Checks.DisplayDelivery.aPausedLinkIsSilentAndKeepsItsTarget),
    ]
    static let stress: [ConformanceCheck] = [
        ConformanceCheck("randomOperationsFromManyThreadsKeepEveryPromise", .stress, Checks.Stress.randomOperationsFromManyThreadsKeepEveryPromise),
    ]
}
