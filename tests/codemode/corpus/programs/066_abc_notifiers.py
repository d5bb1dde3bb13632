import json
from abc import ABC, abstractmethod

class Notifier(ABC):
    sent = []

    @abstractmethod
    async def send(self, user, message): ...

    async def notify_all(self, users, message):
        for user in users:
            result = await self.send(user, message.format(**user))
            Notifier.sent.append((type(self).__name__, user["id"]))
            print(f"[{type(self).__name__}] {result}")

class EmailNotifier(Notifier):
    async def send(self, user, message):
        return await tools.send_email(to=user["email"], subject="Plan update", body=message)

class LogNotifier(Notifier):
    async def send(self, user, message):
        line = f"user={user['id']} msg={message!r}"
        await tools.write_file(path=f"notifications/{user['id']}.log", content=line)
        return line

try:
    Notifier()
except TypeError as e:
    print("abstract:", "Can't instantiate" in str(e))

users = json.loads(await tools.run_sql(query="select * from users where plan = 'free'"))
await EmailNotifier().notify_all(users, "Hi {name}, upgrade from {plan} to pro for 20% off!")
await LogNotifier().notify_all(users[:1], "reminder for {name}")
print(Notifier.sent)
